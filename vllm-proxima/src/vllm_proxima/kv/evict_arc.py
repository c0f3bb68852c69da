"""ARC eviction for the radix prefix cache (Megiddo & Modha), sized in tokens.

Built on :mod:`vllm_proxima.kv.evict`'s entries and policy interface; chosen with
``--proxima-evict arc`` through :func:`~vllm_proxima.kv.evict.make_policy`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from vllm_proxima.kv.evict import _T1, _T2, Entry, EvictionPolicy, _LazyHeap


class ARCPolicy(EvictionPolicy):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003), sized in tokens.

    T1 holds entries used once since they were added (or re-added), T2 entries hit
    again; each is LRU-ordered. B1/B2 remember keys of entries (or evicted tails)
    evicted from T1/T2. Adding an entry whose key is in B1 is a sign T1 is too
    small: ``p`` (T1's target size) grows by ``size * max(1, |B2| / |B1|)`` and the
    entry enters T2; a B2 ghost shrinks ``p`` symmetrically. :meth:`victim` takes
    T1's LRU evictable entry when ``|T1| > p``, else T2's, falling back to the other
    list when one has no evictable entry (ARC's REPLACE; the "x in B2 and |T1| = p"
    tie rule is dropped, as the cache evicts before it knows the next request).

    Args:
        capacity: ``c`` in tokens: the most the cache can hold (the pool's usable
            slots). Bounds ``p`` to ``[0, c]`` and the ghosts.
        max_ghosts: Most ghost entries kept in B1 + B2 together.

    NOTE: Ghosts are bounded as in ARC, ``|T1| + |B1| <= c`` and
    ``|T1| + |T2| + |B1| + |B2| <= 2c`` (tokens), and by ``max_ghosts`` entries;
    the least recent ghosts go first. All entries (interior nodes too) count in
    ``|T1|``/``|T2|``; only evictable ones can be chosen.
    """

    name = "arc"
    uses_ghosts = True

    def __init__(self, capacity: int, max_ghosts: int = 65536) -> None:
        super().__init__()
        if capacity < 1 or max_ghosts < 0:
            raise ValueError(f"bad ARC sizes: {capacity=} {max_ghosts=}")
        self.c = capacity
        self.max_ghosts = max_ghosts
        self.p = 0.0
        self._heaps = (_LazyHeap(), _LazyHeap(), _LazyHeap())  # [0] unused
        self._size = [0, 0, 0]  # tokens in T1 ([1]) and T2 ([2])
        self._ghosts: tuple[OrderedDict[Hashable, int], ...] = (
            OrderedDict(),
            OrderedDict(),
            OrderedDict(),
        )  # B1 ([1]), B2 ([2]): key -> tokens, least recent first
        self._gsize = [0, 0, 0]
        self.ghost_hits = [0, 0, 0]

    # ------------------------------------------------------------ sizes
    @property
    def t1(self) -> int:
        """Tokens in T1."""
        return self._size[_T1]

    @property
    def t2(self) -> int:
        """Tokens in T2."""
        return self._size[_T2]

    @property
    def b1(self) -> int:
        """Tokens remembered in B1."""
        return self._gsize[_T1]

    @property
    def b2(self) -> int:
        """Tokens remembered in B2."""
        return self._gsize[_T2]

    @property
    def num_ghosts(self) -> int:
        """Ghost entries in B1 + B2."""
        return len(self._ghosts[_T1]) + len(self._ghosts[_T2])

    def ghost_of(self, key: Hashable) -> int:
        """1 if ``key`` is remembered in B1, 2 if in B2, else 0."""
        return _T1 if key in self._ghosts[_T1] else _T2 if key in self._ghosts[_T2] else 0

    # ------------------------------------------------------------ protocol
    def add(self, entry: Entry, *, key: Hashable = None, evictable: bool = True) -> None:
        where = _T1
        if key is not None:
            b1, b2 = self._gsize[_T1], self._gsize[_T2]
            for w in (_T1, _T2):
                size = self._ghosts[w].pop(key, None)
                if size is None:
                    continue
                self.ghost_hits[w] += 1
                if w == _T1:  # T1 was too small
                    self.p = min(float(self.c), self.p + size * max(1.0, b2 / b1))
                else:  # T2 was too small
                    self.p = max(0.0, self.p - size * max(1.0, b1 / b2))
                self._gsize[w] -= size
                where = _T2
                break
        entry.where, entry.last, entry.hits, entry.evictable = where, self._tick(), 0, False
        self._size[where] += entry.size
        self.num_entries += 1
        if evictable:
            self._heaps[where].enter(entry, (entry.last,))
        self._trim_ghosts()

    def touch(self, entry: Entry, *, hit: bool = True) -> None:
        entry.last = self._tick()
        if hit:
            entry.hits += 1
            if entry.where == _T1:  # second use: T1 -> T2
                size = entry.size
                self._size[_T1] -= size
                self._size[_T2] += size
                entry.where = _T2
                if entry.evictable:
                    self._heaps[_T1].leave(entry)
                    self._heaps[_T2].enter(entry, (entry.last,))
                return
        self._heaps[entry.where].refresh(entry, (entry.last,))

    def set_evictable(self, entry: Entry, evictable: bool) -> None:
        heap = self._heaps[entry.where]
        if evictable and not entry.evictable:
            heap.enter(entry, (entry.last,))
        elif not evictable:
            heap.leave(entry)

    def remove(self, entry: Entry, *, key: Hashable = None) -> None:
        where = entry.where
        self._heaps[where].leave(entry)
        self._size[where] -= entry.size
        self.num_entries -= 1
        entry.where = 0
        if key is not None:
            self._remember(where, key, entry.size)

    def victim(self) -> Entry | None:
        first, second = (_T1, _T2) if self._size[_T1] > self.p else (_T2, _T1)
        e = self._heaps[first].peek()
        return e if e is not None else self._heaps[second].peek()

    def split(self, entry: Entry, head: Entry) -> None:
        super().split(entry, head)  # same list: sizes add up as before

    def grow(self, entry: Entry, n: int) -> None:
        self._size[entry.where] += n

    def shrink(self, entry: Entry, n: int, *, key: Hashable = None) -> None:
        self._size[entry.where] -= n
        if key is not None:
            self._remember(entry.where, key, n)

    def clear(self) -> None:
        for heap in self._heaps:
            heap.clear()
        for ghosts in self._ghosts:
            ghosts.clear()
        self._size = [0, 0, 0]
        self._gsize = [0, 0, 0]
        self.num_entries = 0
        self.p = 0.0

    def stats(self) -> dict[str, float]:
        return {
            "entries": self.num_entries,
            "p": self.p,
            "t1": self.t1,
            "t2": self.t2,
            "b1": self.b1,
            "b2": self.b2,
            "ghosts": self.num_ghosts,
            "b1_hits": self.ghost_hits[_T1],
            "b2_hits": self.ghost_hits[_T2],
        }

    # ------------------------------------------------------------ ghosts
    def _remember(self, where: int, key: Hashable, size: int) -> None:
        ghosts = self._ghosts[where]
        old = ghosts.pop(key, None)
        if old is not None:
            self._gsize[where] -= old
        ghosts[key] = size
        self._gsize[where] += size
        self._trim_ghosts()

    def _trim_ghosts(self) -> None:
        g, gs, c = self._ghosts, self._gsize, self.c
        cached = self._size[_T1] + self._size[_T2]
        while g[_T1] and gs[_T1] > max(0, c - self._size[_T1]):
            gs[_T1] -= g[_T1].popitem(last=False)[1]
        while (g[_T1] or g[_T2]) and cached + gs[_T1] + gs[_T2] > 2 * c:
            w = _T2 if g[_T2] else _T1  # ARC drops B2's LRU here
            gs[w] -= g[w].popitem(last=False)[1]
        while len(g[_T1]) + len(g[_T2]) > self.max_ghosts:
            w = _T2 if len(g[_T2]) >= len(g[_T1]) else _T1
            gs[w] -= g[w].popitem(last=False)[1]
