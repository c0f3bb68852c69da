"""Tests for vllm_proxima.kv.evict: LRU order, LFU counts, ARC against the textbook."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

try:
    from vllm_proxima.kv.evict import (
        Entry,
        EvictionPolicy,
        LFUPolicy,
        LRUPolicy,
        make_policy,
    )
    from vllm_proxima.kv.evict_arc import ARCPolicy
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima" / "src"))
    from vllm_proxima.kv.evict import (
        Entry,
        EvictionPolicy,
        LFUPolicy,
        LRUPolicy,
        make_policy,
    )
    from vllm_proxima.kv.evict_arc import ARCPolicy


@dataclass(slots=True, eq=False, kw_only=True)
class Item(Entry):
    name: Hashable
    n: int = 1

    @property
    def size(self) -> int:
        return self.n


class Cache:
    """A fixed-capacity cache of sized items driven by a policy (no tree)."""

    def __init__(self, policy: EvictionPolicy, capacity: int) -> None:
        self.policy, self.c = policy, capacity
        self.items: dict[Hashable, Item] = {}
        self.used = self.hits = 0

    def access(self, x: Hashable, size: int = 1) -> bool:
        it = self.items.get(x)
        if it is not None:
            self.policy.touch(it, hit=True)
            self.hits += 1
            return True
        it = Item(name=x, n=size)
        ghost = isinstance(self.policy, ARCPolicy) and self.policy.ghost_of(x)
        if ghost:  # ARC adapts p before REPLACE on a ghost hit
            self.policy.add(it, key=x, evictable=False)
        self.make_room(size)
        if not ghost:
            self.policy.add(it, key=x, evictable=False)
        self.policy.set_evictable(it, True)
        self.items[x] = it
        self.used += size
        return False

    def make_room(self, size: int) -> None:
        while self.used + size > self.c:
            v = self.policy.victim()
            assert isinstance(v, Item)
            self.policy.remove(v, key=v.name)
            del self.items[v.name]
            self.used -= v.n


class TextbookARC:
    """ARC as printed in Megiddo & Modha (2003), Fig. 4, pages of size 1.

    REPLACE's tie rule (``x in B2 and |T1| == p``) is left out, as in ARCPolicy.
    """

    def __init__(self, c: int) -> None:
        self.c, self.p = c, 0.0
        self.t1: OrderedDict[Hashable, None] = OrderedDict()
        self.t2: OrderedDict[Hashable, None] = OrderedDict()
        self.b1: OrderedDict[Hashable, None] = OrderedDict()
        self.b2: OrderedDict[Hashable, None] = OrderedDict()

    def replace(self) -> None:
        if self.t1 and len(self.t1) > self.p:
            self.b1[self.t1.popitem(last=False)[0]] = None
        else:
            self.b2[self.t2.popitem(last=False)[0]] = None

    def access(self, x: Hashable) -> bool:
        t1, t2, b1, b2, c = self.t1, self.t2, self.b1, self.b2, self.c
        if x in t1:
            del t1[x]
            t2[x] = None
            return True
        if x in t2:
            t2.move_to_end(x)
            return True
        if x in b1:
            self.p = min(c, self.p + max(1.0, len(b2) / len(b1)))
            self.replace()
            del b1[x]
            t2[x] = None
        elif x in b2:
            self.p = max(0.0, self.p - max(1.0, len(b1) / len(b2)))
            self.replace()
            del b2[x]
            t2[x] = None
        else:
            if len(t1) + len(b1) == c:
                if len(t1) < c:
                    b1.popitem(last=False)
                    self.replace()
                else:
                    t1.popitem(last=False)
            elif len(t1) + len(t2) + len(b1) + len(b2) >= c:
                if len(t1) + len(t2) + len(b1) + len(b2) == 2 * c:
                    b2.popitem(last=False)
                self.replace()
            t1[x] = None
        return False


# ---------------------------------------------------------------------- LRU / LFU
def items(policy: EvictionPolicy, *names: str) -> list[Item]:
    out = [Item(name=n) for n in names]
    for it in out:
        policy.add(it)
    return out


def test_lru_order_and_evictability_keeps_place() -> None:
    pol = LRUPolicy()
    a, b, c = items(pol, "a", "b", "c")
    assert pol.victim() is a
    pol.touch(a)
    assert pol.victim() is b
    pol.set_evictable(b, False)
    assert pol.victim() is c
    pol.set_evictable(b, True)  # back in its old place, not as new
    assert pol.victim() is b
    pol.touch(b, hit=False)  # a refresh is a use for LRU
    assert pol.victim() is c
    pol.remove(c)
    assert pol.victim() is a
    pol.remove(a)
    pol.set_evictable(b, False)
    assert pol.victim() is None and pol.num_entries == 1


def test_lfu_counts_hits_with_lru_tie_break() -> None:
    pol = LFUPolicy()
    a, b, c = items(pol, "a", "b", "c")
    for _ in range(3):
        pol.touch(a)
    pol.touch(b)
    pol.touch(c)
    assert (a.hits, b.hits, c.hits) == (3, 1, 1)
    assert pol.victim() is b  # 1 hit each: b used longer ago
    pol.touch(b, hit=False)  # refresh: no count, but more recent
    assert b.hits == 1 and pol.victim() is c
    pol.touch(c)
    assert pol.victim() is b
    pol.remove(b)
    assert pol.victim() is c  # 2 hits < 3
    pol.touch(c)
    assert pol.victim() is a  # 3 hits each: a used longer ago
    head = Item(name="head")
    pol.split(a, head)  # a split head inherits the count
    assert head.hits == 3 and not head.evictable


def test_lazy_heap_garbage_stays_bounded() -> None:
    pol = LRUPolicy()
    its = items(pol, *map(str, range(10)))
    for i in range(10_000):
        pol.touch(its[i % 10])
    assert len(pol._heap.items) <= 2 * 10 + 65
    assert pol.victim() is its[0]


def test_make_policy() -> None:
    assert isinstance(make_policy("lru", 10), LRUPolicy)
    assert isinstance(make_policy("lfu", 10), LFUPolicy)
    arc = make_policy("arc", 10)
    assert isinstance(arc, ARCPolicy) and arc.c == 10
    with pytest.raises(ValueError):
        make_policy("fifo", 10)


# ---------------------------------------------------------------------- ARC
def test_arc_scan_does_not_flush_the_frequent_set() -> None:
    hot = [f"hot{i}" for i in range(5)]
    results = {}
    for name in ("lru", "lfu", "arc"):
        cache = Cache(make_policy(name, 10), 10)
        for x in hot + hot:  # second use: ARC moves them to T2
            cache.access(x)
        for i in range(200):  # a one-off scan, 20x the cache
            cache.access(f"scan{i}")
        results[name] = sum(cache.access(x) for x in hot)
    assert results == {"lru": 0, "lfu": 5, "arc": 5}


def test_arc_ghost_hits_adapt_p() -> None:
    pol = ARCPolicy(4)
    cache = Cache(pol, 4)
    for x in (1, 2, 3, 4, 1, 2):  # T1 = [3, 4], T2 = [1, 2]
        cache.access(x)
    cache.access(5)  # |T1| = 2 > p = 0: T1's LRU (3) goes to B1
    assert pol.ghost_of(3) == 1 and pol.p == 0
    cache.access(3)  # B1 hit: T1 was too small
    assert pol.p == 1 and pol.ghost_of(3) == 0 and cache.items[3].where == 2
    assert pol.ghost_of(4) == 1  # REPLACE with |T1| = 2 > p = 1
    cache.access(6)  # |T1| = 1 = p: T2's LRU (1) goes to B2
    assert pol.ghost_of(1) == 2 and set(cache.items) == {2, 3, 5, 6}
    cache.access(1)  # B2 hit: T2 was too small
    assert pol.p == 0 and pol.ghost_hits[1:] == [1, 1]


@settings(max_examples=150, deadline=None)
@given(
    c=st.integers(1, 12),
    trace=st.lists(st.integers(0, 30), max_size=300),
)
def test_arc_unit_sizes_match_the_textbook(c: int, trace: list[int]) -> None:
    pol, ref = ARCPolicy(c, max_ghosts=10**9), TextbookARC(c)
    cache = Cache(pol, c)
    for x in trace:
        assert cache.access(x) == ref.access(x)
        assert pol.p == pytest.approx(ref.p)
        assert (pol.t1, pol.t2, pol.b1, pol.b2) == (
            len(ref.t1), len(ref.t2), len(ref.b1), len(ref.b2),
        )  # fmt: skip
        where = {x: it.where for x, it in cache.items.items()}
        assert where == {**dict.fromkeys(ref.t1, 1), **dict.fromkeys(ref.t2, 2)}
        assert all(pol.ghost_of(g) == 1 for g in ref.b1)
        assert all(pol.ghost_of(g) == 2 for g in ref.b2)


def test_arc_ghosts_are_bounded() -> None:
    rng = np.random.default_rng(0)
    for max_ghosts in (3, 10**9):
        pol = ARCPolicy(50, max_ghosts=max_ghosts)
        cache = Cache(pol, 50)
        for i in range(20_000):
            x = int(rng.integers(0, 20)) if rng.random() < 0.5 else i + 100
            cache.access(x, size=int(rng.integers(1, 8)))
            assert pol.t1 + pol.b1 <= pol.c
            assert pol.t1 + pol.t2 + pol.b1 + pol.b2 <= 2 * pol.c
            assert pol.num_ghosts <= max_ghosts
        assert pol.ghost_hits[1] + pol.ghost_hits[2] > 0
        assert pol.t1 + pol.t2 == cache.used


def test_arc_sized_ghost_moves_p_by_its_size() -> None:
    pol = ARCPolicy(100)
    cache = Cache(pol, 100)
    for x in ("hot", "hot", "big", "new"):  # T2 = [hot], T1 = [big]: "new" evicts big
        cache.access(x, size={"hot": 50, "big": 30, "new": 30}[x])
    assert pol.ghost_of("big") == 1 and pol.b1 == 30
    cache.access("big", size=30)
    assert pol.p == 30  # size * max(1, |B2| / |B1|) with B2 empty
    assert cache.items["big"].where == 2


def test_arc_victim_falls_back_when_preferred_list_is_pinned() -> None:
    pol = ARCPolicy(10)
    a, b = items(pol, "a", "b")
    pol.touch(b)  # b -> T2; |T1| = 1 > p = 0: T1 preferred
    assert pol.victim() is a
    pol.set_evictable(a, False)
    assert pol.victim() is b
    pol.set_evictable(b, False)
    assert pol.victim() is None
    pol.set_evictable(a, True)
    assert pol.victim() is a
    pol.clear()
    assert pol.victim() is None and pol.num_entries == 0 and pol.t1 == 0
