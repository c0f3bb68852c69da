"""Global pool of 1-token KV cache slots with reference counts.

The pool hands out slot ids ``num_reserved .. num_slots - 1``; ids below ``num_reserved`` (slot 0 is the null slot
the model runner pads with) are never handed out. All state is numpy arrays plus a few counters:

* ``_refcnt`` (int32 per slot): 0 = free, k > 0 = held by k owners (requests or the prefix cache).
* ``_free_buf`` (one byte per slot, 1 = free) with ``_is_free``, a numpy bool view sharing its memory. The bytes
  let ``bytearray.find``/``startswith`` search free runs in C: the lowest run of ``n`` free slots is the first
  occurrence of ``b"\\x01" * n``, which CPython finds with a skipping search (fast over used regions).
* ``_stack``/``_top``: a LIFO of free slot ids for scattered allocation, with lazy deletion. ``_in_stack`` marks
  ids present in ``_stack[:_top]`` so that an id is never pushed twice.

NOTE: Stack invariant: every free slot is in the stack exactly once; an id in the stack may be *stale* (allocated
through a contiguous run after it was pushed). Stale entries are dropped when a pop walks over them, and a stale
id that is freed again is already in the stack, so it is not pushed. Each stale entry is created by one allocation
and dropped by one pop, so popping is amortised O(n) for n slots and the stack never needs a full compaction.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

NDArrayI32 = npt.NDArray[np.int32]
NDArrayI64 = npt.NDArray[np.int64]


class SlotPool:
    """Token-granularity slot allocator over ``0 .. num_slots - 1`` with refcounts and contiguity preference.

    Args:
        num_slots: Total slot ids, reserved ones included.
        num_reserved: Leading ids never handed out (slot 0 = the null/padding slot).
        stride: Spacing used by :meth:`allocate_batch` when several 1-slot requests cannot continue at
            ``after + 1``: they are placed ``stride`` apart in the lowest free run of ``m * stride`` slots, so each
            can then grow contiguously for ``stride`` steps. ``1`` = plain scattered allocation.
        debug: Run :meth:`check_invariants` after every mutation.
    """

    __slots__ = ("num_slots", "num_reserved", "stride", "debug", "_refcnt", "_free_buf", "_is_free", "_stack",
                 "_top", "_in_stack", "_scratch", "_num_free")

    def __init__(self, num_slots: int, *, num_reserved: int = 1, stride: int = 16, debug: bool = False) -> None:
        if not 0 <= num_reserved <= num_slots or num_slots >= 2**31 or stride < 1:
            raise ValueError(f"bad pool shape: {num_slots=} {num_reserved=} {stride=}")
        self.num_slots, self.num_reserved, self.stride, self.debug = num_slots, num_reserved, stride, debug
        self._refcnt: NDArrayI32 = np.zeros(num_slots, dtype=np.int32)
        self._free_buf = bytearray(num_slots)
        self._is_free: npt.NDArray[np.bool_] = np.frombuffer(self._free_buf, dtype=np.bool_)
        self._is_free[num_reserved:] = True
        # Descending ids, so pops come out lowest-first and ascending.
        self._stack: NDArrayI32 = np.arange(num_slots - 1, num_reserved - 1, -1, dtype=np.int32)
        self._top = num_slots - num_reserved
        self._in_stack: npt.NDArray[np.bool_] = self._is_free.copy()
        self._scratch: NDArrayI32 = np.empty(num_slots, dtype=np.int32)  # dedup marks; pages touched lazily
        self._num_free = num_slots - num_reserved

    # ----------------------------------------------------------------------------------------------- counters
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

    # ----------------------------------------------------------------------------------------------- allocate
    def allocate(self, n: int, after: int = -1) -> NDArrayI32 | None:
        """Allocates ``n`` slots for one request, all or nothing; each gets refcount 1.

        Prefers, in order: the run ``after + 1 ..`` (when ``after >= 0`` is the request's last slot), the lowest
        free run of ``n`` slots, then scattered free slots.

        Returns:
            The slots in the order the request should use them, or None (state unchanged) if fewer than ``n``
            are free.
        """
        if n < 0:
            raise ValueError(f"negative slot count {n}")
        if n > self._num_free:
            return None
        slots = self._allocate_one(n, after)
        if self.debug:
            self.check_invariants()
        return slots

    def allocate_batch(self, counts: npt.ArrayLike, after: npt.ArrayLike) -> tuple[NDArrayI32, NDArrayI64] | None:
        """Allocates ``counts[i]`` slots for each request ``i`` at once, all or nothing.

        Requests with count 1 (decode) are served vectorised: ``after[i] + 1`` where it is free, the rest placed
        ``stride`` apart in one free run (or scattered). Only requests with count > 1 take a Python loop, one
        :meth:`allocate` each.

        Args:
            counts: Slots wanted per request (>= 0).
            after: Each request's last slot, or -1 for a fresh request.

        Returns:
            ``(slots, offsets)`` in CSR form: request ``i`` gets ``slots[offsets[i]:offsets[i + 1]]``; or None
            (state unchanged) if fewer than ``sum(counts)`` slots are free.
        """
        counts = np.asarray(counts, dtype=np.int64)
        after = np.asarray(after, dtype=np.int64)
        if counts.shape != after.shape or counts.ndim != 1:
            raise ValueError("counts and after must be 1-D and of equal length")
        if counts.size and counts.min() < 0:
            raise ValueError("negative slot count")
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        total = int(offsets[-1])
        if total > self._num_free:
            return None
        out = np.empty(total, dtype=np.int32)
        ones = np.flatnonzero(counts == 1)
        if ones.size:
            nxt = after[ones] + 1
            ok = (nxt >= 0) & (nxt < self.num_slots)
            ok[ok] = self._is_free[nxt[ok]]
            ok[ok] = self._first_occurrence(nxt[ok])  # two requests sharing a tail slot: one continues
            got = nxt[ok]
            self._take(got)
            out[offsets[ones[ok]]] = got
            ones = ones[~ok]
        for i in np.flatnonzero(counts > 1):
            out[offsets[i]:offsets[i + 1]] = self._allocate_one(int(counts[i]), int(after[i]))
        if ones.size:
            out[offsets[ones]] = self._place_spread(ones.size)
        if self.debug:
            self.check_invariants()
        return out, offsets

    def _allocate_one(self, n: int, after: int) -> NDArrayI32:
        # Caller guarantees n <= num_free, so the scattered fallback always succeeds.
        start = -1
        if n == 0:
            return np.empty(0, dtype=np.int32)
        pattern = b"\x01" * n
        if after >= 0 and self._free_buf.startswith(pattern, after + 1):
            start = after + 1
        else:
            start = self._free_buf.find(pattern, self.num_reserved)
        if start < 0:
            slots = self._pop(n)
            self._take(slots)
            return slots
        self._is_free[start:start + n] = False
        self._refcnt[start:start + n] = 1
        self._num_free -= n
        return np.arange(start, start + n, dtype=np.int32)

    def _place_spread(self, m: int) -> NDArrayI32:
        # m fresh single slots, `stride` apart in the lowest run that holds them, else scattered.
        g = self.stride
        start = self._free_buf.find(b"\x01" * ((m - 1) * g + 1), self.num_reserved) if g > 1 else -1
        slots = self._pop(m) if start < 0 else np.arange(start, start + m * g, g, dtype=np.int32)
        self._take(slots)
        return slots

    def _pop(self, n: int) -> NDArrayI32:
        # Takes n free ids off the top of the stack, dropping the stale entries it walks over.
        top = self._top
        w = min(top, 2 * n + 64)
        while True:
            window = self._stack[top - w:top]
            valid = np.flatnonzero(self._is_free[window])
            if valid.size >= n or w == top:
                break
            w = min(top, 4 * w)
        valid = valid[valid.size - n:]
        cut = top - w + int(valid[0]) if n else top
        self._in_stack[self._stack[cut:top]] = False
        self._top = cut
        return window[valid[::-1]]

    def _take(self, slots: NDArrayI32 | npt.NDArray[np.int64]) -> None:
        self._is_free[slots] = False
        self._refcnt[slots] = 1
        self._num_free -= slots.size

    # ---------------------------------------------------------------------------------------- free / share
    def free(self, slots: npt.ArrayLike) -> None:
        """Drops one reference per occurrence of each slot; slots reaching refcount 0 become free.

        Raises:
            ValueError: A slot is out of range, reserved, or would drop below refcount 0 (double free). The
                check runs before any change, so a failed call leaves the pool untouched.
        """
        uniq, new = self._adjust(slots, -1)
        zeroed = uniq[new == 0]
        if zeroed.size:
            self._is_free[zeroed] = True
            self._num_free += zeroed.size
            push = zeroed[~self._in_stack[zeroed]][::-1]  # reversed: pops hand them back in the given order
            self._in_stack[push] = True
            self._stack[self._top:self._top + push.size] = push
            self._top += push.size
        if self.debug:
            self.check_invariants()

    def incref(self, slots: npt.ArrayLike) -> None:
        """Adds one reference per occurrence of each slot (sharing). Slots must be in use (refcount > 0)."""
        self._adjust(slots, +1)
        if self.debug:
            self.check_invariants()

    def _adjust(self, slots: npt.ArrayLike, sign: int) -> tuple[npt.NDArray[np.integer], NDArrayI32]:
        # Adds sign * (occurrences) to each slot's refcount; returns (distinct slots, new refcounts).
        s = np.asarray(slots).ravel()
        if s.size == 0:
            return s.astype(np.int32), np.empty(0, dtype=np.int32)
        if s.dtype.kind not in "iu":
            raise TypeError(f"slot ids must be integers, got {s.dtype}")
        if s.min() < self.num_reserved or s.max() >= self.num_slots:
            raise ValueError(f"slot id out of range [{self.num_reserved}, {self.num_slots})")
        first = self._first_occurrence(s)
        if first.all():
            uniq, mult = s, 1
        else:
            uniq, mult = np.unique(s, return_counts=True)
        old = self._refcnt[uniq]
        if sign < 0 and (old < mult).any():
            raise ValueError(f"double free of slot(s) {uniq[old < mult][:8].tolist()}")
        if sign > 0 and (old == 0).any():
            raise ValueError(f"incref of free slot(s) {uniq[old == 0][:8].tolist()}")
        new = old + sign * mult
        self._refcnt[uniq] = new
        return uniq, new

    def _first_occurrence(self, s: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
        # True for exactly one occurrence of each distinct id, O(len(s)) via the scratch array.
        # NOTE: which duplicate wins depends on numpy's scatter order; exactly one does, which is all we need.
        iota = np.arange(s.size, dtype=np.int32)
        self._scratch[s] = iota
        return self._scratch[s] == iota

    # ------------------------------------------------------------------------------------------- inspection
    def refcount(self, slots: npt.ArrayLike | None = None) -> NDArrayI32:
        """Refcounts of ``slots`` (a copy), or a read-only view of all of them when ``slots`` is None."""
        if slots is None:
            view = self._refcnt.view()
            view.flags.writeable = False
            return view
        return self._refcnt[np.asarray(slots)]

    @staticmethod
    def runs(slots: npt.ArrayLike) -> int:
        """Number of maximal ascending contiguous runs in ``slots`` (1 = fully contiguous, 0 = empty)."""
        s = np.asarray(slots, dtype=np.int64).ravel()
        return int(s.size and 1 + np.count_nonzero(np.diff(s) != 1))

    def check_invariants(self) -> None:
        """Full O(num_slots) consistency check; raises AssertionError on the first violation."""
        r, rc, free = self.num_reserved, self._refcnt, self._is_free

        def require(cond: bool | np.bool_, what: str) -> None:
            if not cond:
                raise AssertionError(f"SlotPool invariant violated: {what}")

        require(bool((rc >= 0).all()), "negative refcount")
        require(not rc[:r].any() and not free[:r].any() and not self._in_stack[:r].any(), "reserved slot touched")
        require(np.array_equal(free[r:], rc[r:] == 0), "free flags != (refcount == 0)")
        require(self._num_free == int(np.count_nonzero(free)), "num_free counter")
        stack = self._stack[:self._top]
        in_stack = np.zeros(self.num_slots, dtype=np.int64)
        np.add.at(in_stack, stack, 1)
        require(bool((in_stack <= 1).all()), "duplicate id in free stack")
        require(np.array_equal(in_stack == 1, self._in_stack), "in_stack flags != stack contents")
        require(not (free & ~self._in_stack).any(), "free slot missing from the stack")
