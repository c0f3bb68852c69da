"""Who holds the token layout's slots, as admission reads it: an index fed by events.

The KV manager (:class:`~vllm_proxima.kv.manager.ProximaKVCacheManager`) owns one
:class:`TokenResidencyIndex` and tells it what changes, through four events:

- :meth:`~TokenResidencyIndex.allocated`: a request holds ``n`` slots now (first
  allocation, a prompt chunk, a decode slot);
- :meth:`~TokenResidencyIndex.cached`: slots of a request joined the prefix cache
  (its prompt offered, or a hit it took): only these can be shared with others;
- :meth:`~TokenResidencyIndex.freed`: the request left (finished, aborted, preempted);
- :meth:`~TokenResidencyIndex.cache_attached`: the prefix cache was built or reset.

The index answers, per resident request, slots held, slots held alone and the
distinct slots two or more hold (:meth:`~TokenResidencyIndex.residency`), and for
a waiting request's hit who holds its slots (:meth:`~TokenResidencyIndex.hit_holders`).
It reads who holds a cached slot from the cache's ``holders`` (pool refcount less the
cache's own reference), the one figure it does not keep itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

Holders = Callable[[NDArray[np.int32] | None], NDArray[np.int32]]
"""Requests holding each given slot (``None``: every slot of the pool)."""


class Residency(NamedTuple):
    """Resident requests as :meth:`TokenResidencyIndex.residency` sees them."""

    held: NDArray[np.int64]  # slots each holds
    alone: NDArray[np.int64]  # of those, slots no other request holds
    handles: NDArray[np.int64]  # residency handle (-1: holds no slots)
    shared: int  # distinct slots two or more requests hold


class _Holding:
    """One residency: a handle (a resumed request gets a new one), slots held, and
    the slots it has in the cache (copies of its leading slot ids)."""

    __slots__ = ("cached", "handle", "held", "parts")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.held = 0
        self.cached = 0
        self.parts: list[NDArray[np.int32]] = []


class TokenResidencyIndex:
    """Per-request residency of the 1-token slot pool, kept from the manager's events.

    Args:
        num_slots: slots in the pool.
        sharing: prefix sharing on (else nothing is ever shared and no owner array
            is kept).
    """

    def __init__(self, num_slots: int, sharing: bool) -> None:
        self._holding: dict[str, _Holding] = {}
        self._handles = itertools.count()
        self._holders: Holders | None = None
        # A residency (handle) holding each cached slot: set when a request caches or
        # hits it; read only for slots exactly one request holds (a stale entry names
        # a finished request, and the admission then counts the slot twice).
        self._owner = np.full(num_slots, -1, dtype=np.int64) if sharing else None
        self._num_slots = num_slots

    # ---------------------------------------------------------------- events
    def cache_attached(self, holders: Holders | None) -> None:
        """A prefix cache was built (or rebuilt empty): where holders are read from."""
        self._holders = holders
        if self._owner is not None:
            self._owner.fill(-1)
        for h in self._holding.values():
            h.cached, h.parts = 0, []

    def allocated(self, request_id: str, num_held: int) -> None:
        """``request_id`` holds ``num_held`` slots now."""
        h = self._holding.get(request_id)
        if h is None:
            h = self._holding[request_id] = _Holding(next(self._handles))
        h.held = num_held

    def cached(self, request_id: str, slots: NDArray[np.int32]) -> None:
        """``slots``, the request's next leading slots, are in the prefix cache now."""
        h = self._holding.get(request_id)
        if h is None or not slots.size:
            return
        h.parts.append(slots.copy())
        h.cached += int(slots.size)
        if self._owner is not None:
            # The latest holder: the likeliest to hold them alone later (the earlier
            # ones tend to finish first).
            self._owner[slots] = h.handle

    def freed(self, request_id: str) -> None:
        """The request holds no slots any more."""
        self._holding.pop(request_id, None)

    # --------------------------------------------------------------- queries
    def handle_of(self, request_id: str) -> int:
        """The request's residency handle (-1: it holds no slots)."""
        h = self._holding.get(request_id)
        return h.handle if h is not None else -1

    def residency(self, request_ids: list[str]) -> Residency:
        """What the admission policy reads of the resident requests, in one pass.

        Per request: slots held, slots held alone (no other request holds them) and
        its residency handle; and the distinct slots two or more requests hold
        (``shared``). Only slots a request has in the cache can be shared: others
        reach slots through cache hits only.
        Cost: one vectorised pass over the pool's refcounts and one gather over the
        cached slots (duplicates included: a shared prefix once per holder); where the
        cached slots are under 1/8 of the pool, one gather of their holders instead
        (``shared`` then exact when every holder is listed).
        NOTE: cached slots nobody holds above slots someone holds (a prefix computed
        twice in one step, one copy cached, the other extended) are not counted.
        """
        n = len(request_ids)
        sizes = np.zeros(n, dtype=np.int64)
        offered = np.zeros(n, dtype=np.int64)
        handles = np.full(n, -1, dtype=np.int64)
        parts: list[NDArray[np.int32]] = []
        for i, rid in enumerate(request_ids):
            h = self._holding.get(rid)
            if h is not None:
                sizes[i], handles[i] = h.held, h.handle
                offered[i] = h.cached
                parts.extend(h.parts)
        if self._holders is None or not parts:
            return Residency(sizes, sizes.copy(), handles, 0)
        slots = np.concatenate(parts)
        alone = sizes - offered
        nonempty = np.flatnonzero(offered)
        starts = np.concatenate(([0], np.cumsum(offered[nonempty])[:-1]))
        if slots.size * 8 >= self._num_slots:
            # Over the pool, contiguous (cheaper than gathering holders per offered
            # slot, which lists a shared prefix once per holder): exact, whoever holds.
            holders = self._holders(None)
            shared = int(np.count_nonzero(holders >= 2))
            alone_flag = (holders == 1)[slots]
        else:
            # Few offered slots in a large pool (~0.6 ms a pass at 1M slots): gather.
            # Summing 1/holders counts a shared slot once when all its holders are
            # listed (the admission lists every running request).
            holders = self._holders(slots)
            many = holders[holders >= 2]
            shared = int(round(float(np.sum(1.0 / many)))) if many.size else 0
            alone_flag = holders == 1
        alone[nonempty] += np.add.reduceat(alone_flag, starts, dtype=np.int64)
        return Residency(sizes, alone, handles, shared)

    def hit_holders(self, slots: NDArray[np.int32]) -> tuple[int, NDArray[np.int64]]:
        """Of the cached ``slots`` a waiting request would take (its prefix-cache hit):
        how many resident requests already hold (admitting it pins nothing new there),
        and the residency handles of the sole holders of those exactly one resident
        holds (they become shared)."""
        if not slots.size or self._holders is None or self._owner is None:
            return 0, np.empty(0, dtype=np.int64)
        holders = self._holders(slots)
        return int(np.count_nonzero(holders)), self._owner[slots[holders == 1]]
