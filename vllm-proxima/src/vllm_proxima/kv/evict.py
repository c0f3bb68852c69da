"""Eviction policies for the radix prefix cache: LRU, LFU and ARC over cache entries.

An entry is one radix-tree node (a run of cached tokens). The cache owns the
entries and tells the policy what happens to them; the policy only orders them:

* :meth:`EvictionPolicy.add` / :meth:`~EvictionPolicy.remove`: an entry appears or
  goes (``remove(key=...)`` = it was evicted, ARC remembers it as a ghost).
* :meth:`~EvictionPolicy.touch`: a use. ``hit=True`` for a prefix-cache hit
  (counts for LFU, promotes T1 -> T2 in ARC), ``hit=False`` for a refresh (the
  owner re-inserted it): recency only.
* :meth:`~EvictionPolicy.split` / :meth:`~EvictionPolicy.grow` /
  :meth:`~EvictionPolicy.shrink`: the entry's token run changed size.
* :meth:`~EvictionPolicy.set_evictable`: whether the entry may be chosen now (the
  cache says: a leaf whose last slot only the cache references). Entries that stop
  and start being evictable keep their place in the order.
* :meth:`~EvictionPolicy.victim`: the best evictable entry, left in place (the cache
  may evict only its tail and come back for more).

Orders are binary heaps with lazy deletion: each change of an entry's priority or
evictability bumps ``entry.ver`` and pushes a fresh item; stale items are dropped
when they reach the top, and a heap is rebuilt when stale items outnumber live ones,
so every operation is O(log n) amortised.

NOTE: Sizes are in tokens (= slots). ARC runs Megiddo & Modha's algorithm with
sizes: ``|T1|``, ``|T2|``, ``|B1|``, ``|B2|`` and the target ``p`` count tokens, and a
ghost hit moves ``p`` by the ghost's size times the usual ratio. With 1-token
entries it is the textbook ARC (up to REPLACE's tie rule, see
:class:`~vllm_proxima.kv.evict_arc.ARCPolicy`, in its own module).
"""

from __future__ import annotations

import heapq
import itertools
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import ClassVar

_uids = itertools.count()

#: T1 / T2 values of :attr:`Entry.where` (ARC's lists); 0 = not in a list.
_T1, _T2 = 1, 2


@dataclass(slots=True, eq=False, kw_only=True)
class Entry:
    """Policy bookkeeping carried by each cache entry (subclassed by the tree node).

    Attributes:
        uid: Unique id, breaks ties in heap order.
        last: Logical time of the last use (the policy's clock).
        hits: Cache hits since the entry was added (LFU's count).
        evictable: Whether the entry may be chosen by :meth:`EvictionPolicy.victim`.
        ver: Bumped on every priority/evictability change; heap items carry it.
        where: ARC list (1 = T1, 2 = T2), 0 when not tracked or not ARC.
    """

    uid: int = field(default_factory=_uids.__next__)
    last: int = 0
    hits: int = 0
    evictable: bool = False
    ver: int = 0
    where: int = 0

    @property
    def size(self) -> int:
        """Tokens in the entry."""
        raise NotImplementedError


class _LazyHeap:
    """Min-heap of evictable entries, lazily deleted (see the module docstring)."""

    __slots__ = ("items", "live")

    def __init__(self) -> None:
        self.items: list[tuple] = []  # (*priority, uid, ver, entry)
        self.live = 0  # evictable entries in this heap

    def enter(self, e: Entry, prio: tuple) -> None:
        """Makes ``e`` evictable in this heap with priority ``prio``."""
        if not e.evictable:
            e.evictable = True
            self.live += 1
        self._push(e, prio)

    def leave(self, e: Entry) -> None:
        """Makes ``e`` non-evictable (its items go stale)."""
        if e.evictable:
            e.evictable = False
            e.ver += 1
            self.live -= 1

    def refresh(self, e: Entry, prio: tuple) -> None:
        """Re-prioritises ``e`` if it is evictable."""
        if e.evictable:
            self._push(e, prio)

    def _push(self, e: Entry, prio: tuple) -> None:
        e.ver += 1
        items = self.items
        if len(items) > 2 * self.live + 64:  # mostly stale: rebuild, O(n) once per n pushes
            items[:] = [it for it in items if it[-1].evictable and it[-1].ver == it[-2]]
            heapq.heapify(items)
        heapq.heappush(items, (*prio, e.uid, e.ver, e))

    def peek(self) -> Entry | None:
        """The evictable entry with the lowest priority, or None."""
        items = self.items
        while items:
            top = items[0]
            e = top[-1]
            if e.evictable and e.ver == top[-2]:
                return e
            heapq.heappop(items)
        return None

    def clear(self) -> None:
        self.items.clear()
        self.live = 0


class EvictionPolicy(ABC):
    """Orders cache entries for eviction; see the module docstring for the protocol.

    NOTE: ``victim`` only returns entries marked evictable; the cache re-checks and
    calls ``set_evictable(entry, False)`` on one that turns out not to be.
    """

    name: ClassVar[str]
    #: Whether :meth:`add`, :meth:`remove` and :meth:`shrink` use ``key`` (ghosts).
    uses_ghosts: ClassVar[bool] = False

    def __init__(self) -> None:
        self._clock = 0
        self.num_entries = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    @abstractmethod
    def add(self, entry: Entry, *, key: Hashable = None, evictable: bool = True) -> None:
        """Starts tracking a new entry (as just used, ``hits = 0``).

        Args:
            entry: The new entry; ``entry.size`` is its size now.
            key: Identity of its content for ghost lists (a re-added evicted entry).
            evictable: Whether it may be chosen right away.
        """

    @abstractmethod
    def touch(self, entry: Entry, *, hit: bool = True) -> None:
        """Records a use: a cache hit (``hit``) or a recency-only refresh."""

    @abstractmethod
    def set_evictable(self, entry: Entry, evictable: bool) -> None:
        """Marks the entry as (not) eligible for :meth:`victim`; keeps its place."""

    @abstractmethod
    def remove(self, entry: Entry, *, key: Hashable = None) -> None:
        """Stops tracking ``entry`` (size still as accounted).

        Args:
            entry: The entry.
            key: Set when the entry was evicted: ghost identity of its content.
        """

    @abstractmethod
    def victim(self) -> Entry | None:
        """The evictable entry to evict next (not removed), or None if there is none."""

    def split(self, entry: Entry, head: Entry) -> None:
        """``head`` was carved off the front of ``entry`` (sizes already updated).

        The head inherits the entry's recency, hits and list and starts
        non-evictable (it is the tail's parent).
        """
        head.last, head.hits, head.where = entry.last, entry.hits, entry.where
        head.evictable = False
        self.num_entries += 1

    @abstractmethod
    def grow(self, entry: Entry, n: int) -> None:
        """``n`` tokens were appended to ``entry``."""

    @abstractmethod
    def shrink(self, entry: Entry, n: int, *, key: Hashable = None) -> None:
        """``n`` tokens were evicted from the end of ``entry``, which stays.

        Args:
            entry: The entry (``entry.size`` already reduced).
            n: Tokens evicted.
            key: Ghost identity of the evicted tokens.
        """

    @abstractmethod
    def clear(self) -> None:
        """Forgets every entry (and ghost)."""

    def stats(self) -> dict[str, float]:
        """Policy counters for logging."""
        return {"entries": self.num_entries}


class _HeapPolicy(EvictionPolicy):
    """One lazy heap ordered by :meth:`_prio` (lowest first)."""

    def __init__(self) -> None:
        super().__init__()
        self._heap = _LazyHeap()

    @staticmethod
    @abstractmethod
    def _prio(e: Entry) -> tuple: ...

    def add(self, entry: Entry, *, key: Hashable = None, evictable: bool = True) -> None:
        entry.last, entry.hits, entry.evictable = self._tick(), 0, False
        self.num_entries += 1
        if evictable:
            self._heap.enter(entry, self._prio(entry))

    def touch(self, entry: Entry, *, hit: bool = True) -> None:
        entry.last = self._tick()
        if hit:
            entry.hits += 1
        self._heap.refresh(entry, self._prio(entry))

    def set_evictable(self, entry: Entry, evictable: bool) -> None:
        if evictable and not entry.evictable:
            self._heap.enter(entry, self._prio(entry))
        elif not evictable:
            self._heap.leave(entry)

    def remove(self, entry: Entry, *, key: Hashable = None) -> None:
        self._heap.leave(entry)
        self.num_entries -= 1

    def victim(self) -> Entry | None:
        return self._heap.peek()

    def grow(self, entry: Entry, n: int) -> None:
        return None  # sizes do not order LRU/LFU

    def shrink(self, entry: Entry, n: int, *, key: Hashable = None) -> None:
        return None

    def clear(self) -> None:
        self._heap.clear()
        self.num_entries = 0

    def stats(self) -> dict[str, float]:
        return {"entries": self.num_entries, "evictable": self._heap.live}


class LRUPolicy(_HeapPolicy):
    """Least recently used first (hits and refreshes both count as uses)."""

    name = "lru"

    @staticmethod
    def _prio(e: Entry) -> tuple:
        return (e.last,)


class LFUPolicy(_HeapPolicy):
    """Fewest hits first, least recently used among equals.

    NOTE: The count is prefix-cache hits on the entry since it was added (a split
    head inherits it); refreshes by the inserting request do not count. No aging.
    """

    name = "lfu"

    @staticmethod
    def _prio(e: Entry) -> tuple:
        return (e.hits, e.last)


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """Builds the policy ``--proxima-evict`` names.

    Args:
        name: ``"lru"``, ``"lfu"`` or ``"arc"``.
        capacity: Most tokens the cache can hold (used by ARC).

    Raises:
        ValueError: Unknown name.
    """
    from vllm_proxima.kv.evict_arc import ARCPolicy  # ARC builds on this module's base

    if name == "arc":
        return ARCPolicy(capacity)
    policies: dict[str, type[EvictionPolicy]] = {"lru": LRUPolicy, "lfu": LFUPolicy}
    cls = policies.get(name)
    if cls is None:
        raise ValueError(f"unknown eviction policy {name!r}; choose from ['arc', 'lfu', 'lru']")
    return cls()
