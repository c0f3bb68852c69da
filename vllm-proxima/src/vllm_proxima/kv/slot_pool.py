"""Global pool of 1-token KV cache slots with reference counts.

The pool hands out slot ids ``num_reserved .. num_slots - 1``; lower ids (slot 0 is
the null slot the model runner pads with) are never handed out. State, all numpy:

* ``_refcnt`` (int32 per slot): 0 = free, k > 0 = held by k owners.
* ``_free_buf``: one byte per slot, 1 = free, padded with 0 ("used") bytes to a
  multiple of 8 plus at least one sentinel at index ``num_slots``. ``_is_free`` is a
  numpy bool view of the same memory, ``_words`` a uint64 view (8 slots per word).
* ``_full_buf``: one byte per 8-slot group, 1 = all 8 free (``_full`` is its view).
* ``_stack[:_top]``: a LIFO of free slot ids for scattered allocation.
* ``_hint[n]``: no free run of ``n`` slots starts below it (allocations create no
  runs, so hints stay true until :meth:`SlotPool.free` clears them).
* ``_no_run``: no free run of ``_no_run`` (or more) slots exists, cleared likewise.
  On a nearly full pool most decode steps cannot continue in place and look for
  runs of 128, 64, .. 4 slots that are not there; this makes each of those a
  comparison until the next free.

Runs are found with ``bytearray.find``, which scans in C: the lowest run of ``n``
free slots is the first occurrence of ``b"\x01" * n`` in ``_free_buf``. For
``n >= 15`` the search first looks for ``k = (n - 7) // 8`` all-free groups in the
8x smaller ``_full_buf`` (every run of ``n`` slots contains ``k`` whole groups),
then checks the few slots around each candidate exactly.

Placement: a request continues at ``after + 1`` when it can. When it cannot, a
growing request (``after >= 0``) moves ``g`` slots into a free run that leaves
``g - 1`` free slots after it (``g = stride``, halved while no such run exists),
so it can keep growing in place; packing moved requests tightly instead would make
every decode step of every request start a new run (measured: ~4 slots per run
instead of ~120 at 92% usage, see ``tests/unit/bench_slot_pool.py``). Fresh
requests take the lowest fitting run; with no run left, slots come scattered.

NOTE: The stack is lazy. Every free slot is in it at least once; an entry may be
stale (its slot was since allocated through a run) or repeated (freed again while
a stale entry was still there). Pops skip and drop such entries, and the stack is
rebuilt from ``_is_free`` in O(num_slots) only when full (its capacity is twice
the usable slots, so at most once per ``num_usable`` frees). Every entry is pushed
once and dropped once: popping n slots is amortised O(n).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

NDArrayI32 = npt.NDArray[np.int32]
NDArrayI64 = npt.NDArray[np.int64]
_ONE = np.int32(1)
_ALL_FREE = np.uint64(0x0101010101010101)  # 8 free slots seen as one uint64


def _find_ones(buf: bytearray, k: int, start: int) -> int:
    """Index of the first ``k`` consecutive 1 bytes in ``buf[start:]``, or -1.

    NOTE: ``bytearray.find`` skips only about ``k`` bytes per step over 0 bytes,
    so a single-byte search (``memchr``) first jumps over the leading 0 bytes.
    """
    start = buf.find(b"\x01", start)
    return start if k == 1 or start < 0 else buf.find(b"\x01" * k, start)


class SlotPool:
    """Token-granularity slot allocator with refcounts that prefers contiguous runs.

    Args:
        num_slots: Total slot ids, reserved ones included.
        num_reserved: Leading ids never handed out (slot 0 = the null/padding slot).
        stride: Most growth room for requests that must move. A request with
            ``after >= 0`` that cannot continue at ``after + 1`` goes ``g``
            slots into the lowest free run that leaves ``g - 1`` free slots
            after it, for the first of ``g = stride, stride // 2, .., 2`` that
            has such a run. ``1`` = no room: lowest fit, as for fresh requests.
        debug: Run :meth:`check_invariants` after every mutation.
    """

    __slots__ = (
        "_free_buf", "_full", "_full_buf", "_hint", "_is_free", "_no_run", "_num_free",
        "_refcnt", "_rooms", "_scratch", "_stack", "_top", "_words", "debug",
        "num_reserved", "num_slots", "stride",
    )  # fmt: skip

    def __init__(
        self,
        num_slots: int,
        *,
        num_reserved: int = 1,
        stride: int = 64,
        debug: bool = False,
    ) -> None:
        if not 0 <= num_reserved <= num_slots < 2**30 or stride < 1:
            raise ValueError(f"bad pool: {num_slots=} {num_reserved=} {stride=}")
        self.num_slots, self.num_reserved = num_slots, num_reserved
        self.stride, self.debug = stride, debug
        self._refcnt: NDArrayI32 = np.zeros(num_slots, dtype=np.int32)
        self._free_buf = bytearray(num_slots // 8 * 8 + 8)  # >= 1 sentinel byte
        self._is_free = np.frombuffer(self._free_buf, dtype=np.bool_)
        self._words = np.frombuffer(self._free_buf, dtype=np.uint64)
        self._is_free[num_reserved:num_slots] = True
        self._full_buf = bytearray(len(self._words))
        self._full = np.frombuffer(self._full_buf, dtype=np.bool_)
        np.equal(self._words, _ALL_FREE, out=self._full)
        self._stack: NDArrayI32 = np.empty(2 * self.num_usable + 8, dtype=np.int32)
        self._stack[: self.num_usable] = np.arange(
            num_slots - 1, num_reserved - 1, -1, dtype=np.int32
        )
        self._top = self.num_usable  # descending ids: pops go lowest-first
        self._scratch: NDArrayI32 = np.empty(num_slots, dtype=np.int32)  # lazy pages
        self._num_free = self.num_usable
        self._hint: dict[int, int] = {}
        self._no_run = num_slots + 1
        self._rooms = tuple(stride >> i for i in range(stride.bit_length() - 1))

    # ---------------------------------------------------------------- counters
    @property
    def num_usable(self) -> int:
        """Slots that can ever be handed out."""
        return self.num_slots - self.num_reserved

    @property
    def num_free(self) -> int:
        """Slots with refcount 0."""
        return self._num_free

    @property
    def num_used(self) -> int:
        """Slots with refcount > 0."""
        return self.num_usable - self._num_free

    @property
    def usage(self) -> float:
        """Fraction of usable slots in use, in [0, 1]."""
        return self.num_used / self.num_usable if self.num_usable else 0.0

    # ---------------------------------------------------------------- allocate
    def allocate(self, n: int, after: int = -1) -> NDArrayI32 | None:
        """Allocates ``n`` slots for one request, all or nothing, each at refcount 1.

        Prefers, in order: the run ``after + 1 ..`` (when ``after >= 0``, the
        request's last slot), a free run with ``stride`` room around it (only when
        ``after >= 0``), the lowest free run of ``n`` slots, scattered slots.

        Returns:
            The slots, in the order the request should use them, or None (and no
            state change) if fewer than ``n`` slots are free.
        """
        if n == 1 and self._num_free:
            # A decode step, in bytes and scalars (numpy slicing costs ~1 us a call).
            # Continue the run in place if possible: the sentinel byte at num_slots
            # is never free, so after + 1 needs no bound check.
            in_place = after >= 0 and self._free_buf[after + 1]
            nxt = after + 1 if in_place else self._place_one(after)
            self._free_buf[nxt] = 0
            self._full_buf[nxt >> 3] = 0
            self._refcnt[nxt] = 1
            self._num_free -= 1
            if self.debug:
                self.check_invariants()
            return np.array((nxt,), dtype=np.int32)
        if n < 0:
            raise ValueError(f"negative slot count {n}")
        if n > self._num_free:
            return None
        slots = self._allocate_one(n, after)
        if self.debug:
            self.check_invariants()
        return slots

    def _allocate_one(self, n: int, after: int) -> NDArrayI32:
        # Caller guarantees 0 <= n <= num_free, so the scattered fallback succeeds.
        if n == 0:
            return np.empty(0, dtype=np.int32)
        start = -1
        if after >= 0 and self._free_buf.startswith(b"\x01" * n, after + 1):
            start = after + 1
        elif after >= 0:  # a growing request moves: keep room on both sides
            for g in self._rooms:
                if n + 2 * g - 1 >= self._no_run:
                    continue
                start = self._find_run(n + 2 * g - 1)
                if start >= 0:
                    start += g
                    break
        if start < 0:
            start = self._find_run(n)
        if start < 0:
            slots = self._pop(n)
            self._refcnt[slots] = 1
            self._mark_used(slots)
            return slots
        end = start + n
        self._refcnt[start:end] = 1
        self._is_free[start:end] = False
        self._full[start >> 3 : ((end - 1) >> 3) + 1] = False
        self._num_free -= n
        return np.arange(start, end, dtype=np.int32)

    def _place_one(self, after: int) -> int:
        # One slot where after + 1 is taken (or after < 0), as _allocate_one(1, after)
        # places it; a free slot exists, so the lowest run of 1 does.
        if after >= 0:
            for g in self._rooms:
                if 2 * g >= self._no_run:
                    continue
                start = self._find_run(2 * g)
                if start >= 0:
                    return start + g
        return self._find_run(1)

    def _find_run(self, n: int) -> int:
        # Start of the lowest run of n free slots, or -1. self._hint[n]: no such
        # run starts below it (allocations create no runs; free() clears hints).
        if n >= self._no_run:
            return -1
        buf, lo = self._free_buf, self._hint.get(n, self.num_reserved)
        if lo >= self.num_slots:
            return -1
        if n < 15:
            start = _find_ones(buf, n, lo)
        else:
            k = (n - 7) // 8
            g = _find_ones(self._full_buf, k, lo >> 3)
            while g >= 0:
                start = buf.rfind(b"\x00", 0, 8 * g) + 1
                used = buf.find(b"\x00", 8 * (g + k), start + n)
                if used < 0:
                    break
                g = _find_ones(self._full_buf, k, (used >> 3) + 1)
            else:
                start = -1
        if start >= 0:
            self._hint[n] = start
        else:
            self._hint[n] = self.num_slots
            self._no_run = min(self._no_run, n)
        return start

    def _pop(self, n: int) -> NDArrayI32:
        # n distinct free ids off the top of the stack; drops what it walks over.
        top, w = self._top, min(self._top, 2 * n + 64)
        while True:
            window = self._stack[top - w : top][::-1]  # top first
            take = np.flatnonzero(self._is_free[window])
            if take.size > 1:  # repeated entries: keep the first of each
                ids = window[take]
                self._scratch[ids[::-1]] = take[::-1]
                take = take[self._scratch[ids] == take]
            if take.size >= n or w == top:
                break
            w = min(top, 4 * w)
        take = take[:n]
        self._top = top - int(take[-1]) - 1
        return window[take]

    def _mark_used(self, slots: npt.NDArray[np.integer]) -> None:
        self._is_free[slots] = False
        self._full[slots >> 3] = False
        self._num_free -= slots.size

    # ---------------------------------------------------------------- free / share
    def free(self, slots: npt.ArrayLike) -> None:
        """Drops one reference per occurrence; slots reaching refcount 0 become free.

        Raises:
            ValueError: A slot is reserved or negative, or would drop below
                refcount 0 (double free). Checked before any change.
            IndexError: A slot is >= ``num_slots``.
        """
        zeroed = self._add_refs(slots, -1)
        if zeroed.size:
            self._hint.clear()
            self._no_run = self.num_slots + 1
            self._is_free[zeroed] = True
            groups = zeroed >> 3
            self._full[groups] = self._words[groups] == _ALL_FREE
            self._num_free += zeroed.size
            if self._top + zeroed.size > self._stack.size:
                self._rebuild_stack()
            else:  # reversed, so that pops hand them back in the given order
                self._stack[self._top : self._top + zeroed.size] = zeroed[::-1]
                self._top += zeroed.size
        if self.debug:
            self.check_invariants()

    def incref(self, slots: npt.ArrayLike) -> None:
        """Adds one reference per occurrence of each slot; all must be in use.

        Raises:
            ValueError: A slot is free, reserved or negative (checked first).
        """
        self._add_refs(slots, +1)
        if self.debug:
            self.check_invariants()

    def _add_refs(self, slots: npt.ArrayLike, sign: int) -> npt.NDArray[np.integer]:
        # Adds sign per occurrence; returns the distinct slots that reached 0.
        s = np.asarray(slots).ravel()
        if s.size == 0:
            return np.empty(0, dtype=np.int32)
        if s.dtype.kind not in "iu":
            raise TypeError(f"slot ids must be integers, got {s.dtype}")
        if np.count_nonzero(s < self.num_reserved):
            raise ValueError(f"reserved or negative slot id in {s[:8]}...")
        old = self._refcnt[s]
        if np.count_nonzero(old == 0):
            what = "double free of" if sign < 0 else "incref of free"
            raise ValueError(f"{what} slot(s) {s[old == 0][:8].tolist()}")
        np.add.at(self._refcnt, s, np.int32(sign))
        new = self._refcnt[s]
        if np.count_nonzero(new - old != sign):  # duplicated ids in `slots`
            if np.count_nonzero(new < 0):
                np.add.at(self._refcnt, s, np.int32(-sign))
                raise ValueError(f"double free of slot(s) {s[new < 0][:8].tolist()}")
            s, first = np.unique(s, return_index=True)
            new = new[first]
        return s[new == 0] if sign < 0 else s[:0]

    def _rebuild_stack(self) -> None:
        free = np.flatnonzero(self._is_free)[::-1]  # descending: pops go lowest-first
        self._stack[: free.size] = free
        self._top = free.size

    # ---------------------------------------------------------------- inspection
    def refcount(self, slots: npt.ArrayLike | None = None) -> NDArrayI32:
        """Refcounts of ``slots`` (a copy), or a read-only view of all of them."""
        if slots is None:
            view = self._refcnt.view()
            view.flags.writeable = False
            return view
        return self._refcnt[np.asarray(slots)]

    @staticmethod
    def runs(slots: npt.ArrayLike) -> int:
        """Number of maximal ``+1``-contiguous runs in ``slots`` (0 when empty)."""
        s = np.asarray(slots, dtype=np.int64).ravel()
        return int(s.size and 1 + np.count_nonzero(np.diff(s) != 1))

    def check_invariants(self) -> None:
        """Full O(num_slots) consistency check; raises AssertionError on a violation."""
        n, r, rc, free = self.num_slots, self.num_reserved, self._refcnt, self._is_free

        def require(ok: bool | np.bool_, what: str) -> None:
            if not ok:
                raise AssertionError(f"SlotPool invariant violated: {what}")

        require(not np.count_nonzero(rc < 0), "negative refcount")
        require(not rc[:r].any() and not free[:r].any(), "reserved slot in use/free")
        require(not free[n:].any(), "padding byte marked free")
        require(np.array_equal(free[r:n], rc[r:] == 0), "free flag != (refcount == 0)")
        require(self._num_free == np.count_nonzero(free), "num_free counter")
        require(np.array_equal(self._full, self._words == _ALL_FREE), "group flags")
        in_stack = np.zeros(len(free), dtype=np.bool_)
        in_stack[self._stack[: self._top]] = True
        require(not np.count_nonzero(free & ~in_stack), "free slot missing from stack")
        if self._no_run <= n:
            run = self._free_buf.find(b"\x01" * self._no_run, r)
            require(run < 0, f"no run of {self._no_run} recorded, but one at {run}")
        for k, lo in self._hint.items():
            first = self._free_buf.find(b"\x01" * k, r)
            require(first < 0 or first >= lo, f"hint {k} -> {lo}, but run at {first}")
