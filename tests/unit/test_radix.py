"""Tests for vllm_proxima.kv.radix: unit cases plus model checks against a brute force.

The model is a dict ``(namespace, token prefix tuple) -> slot`` (one entry per cached
position) plus the references requests hold; the pool's refcounts must be exactly
``caller references + 1 per cached position`` after every operation.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

try:
    from vllm_proxima.kv.radix import RadixCache
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima" / "src"))
    from vllm_proxima.kv.radix import RadixCache
from vllm_proxima.kv.slot_pool import SlotPool

POLICIES = ("lru", "lfu", "arc")
Key = tuple[Hashable, tuple[int, ...]]


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int32)


# ---------------------------------------------------------------------- unit cases
@pytest.mark.parametrize("policy", POLICIES)
def test_match_insert_split_at_any_position(policy: str) -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, policy, debug=True)
    a = pool.allocate(10)
    toks = np.arange(10, 20, dtype=np.int32)
    assert cache.insert(toks, a) == 10
    assert pool.refcount(a).tolist() == [2] * 10
    got, n = cache.match(np.concatenate((toks[:7], arr(99, 98))))
    assert n == 7 and got.tolist() == a[:7].tolist()
    # Diverge after 3 tokens: split 3 | 7, new branch of 4 slots.
    b = pool.allocate(4)
    other = np.concatenate((toks[:3], arr(5, 6, 7, 8)))
    assert cache.insert(other, np.concatenate((a[:3], b))) == 4
    assert cache.num_nodes == 3 and cache.num_cached_slots == 14
    assert cache.match(other)[0].tolist() == a[:3].tolist() + b.tolist()
    assert cache.match(toks)[0].tolist() == a.tolist()
    # Split again inside the tail run (at 3 + 4 = 7).
    c = pool.allocate(1)
    third = np.concatenate((toks[:7], arr(1)))
    assert cache.insert(third, np.concatenate((a[:7], c))) == 1
    assert cache.match(third)[0].tolist() == a[:7].tolist() + c.tolist()
    assert cache.match(toks)[0].tolist() == a.tolist()
    assert cache.match(arr(10, 11, 12, 5))[1] == 4 and cache.match(arr(1, 2))[1] == 0
    assert cache.match(arr())[1] == 0 and cache.insert(arr(), arr()) == 0


def test_cached_positions_keep_their_slot() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, debug=True)
    a, dup = pool.allocate(5), pool.allocate(8)
    toks = np.arange(8, dtype=np.int32)
    cache.insert(toks[:5], a)
    assert cache.insert(toks, dup) == 3  # only positions 5..7 are new
    assert pool.refcount(dup).tolist() == [1] * 5 + [2] * 3  # duplicates not taken
    assert cache.match(toks)[0].tolist() == a.tolist() + dup[5:].tolist()
    assert cache.insert(toks[:3], dup[:3]) == 0  # ends inside a run: nothing new


def test_chunks_extend_a_fresh_leaf_in_place() -> None:
    pool = SlotPool(1000, debug=True)
    cache = RadixCache(pool, debug=True)
    toks = np.arange(300, dtype=np.int32) % 7
    slots = pool.allocate(300)
    for end in range(50, 301, 50):  # chunked prefill, then more
        cache.insert(toks[:end], slots[:end])
    assert cache.num_nodes == 1 and cache.num_cached_slots == 300
    more = pool.allocate(40, after=int(slots[-1]))
    full_toks = np.concatenate((toks, np.arange(40, dtype=np.int32)))
    full = np.concatenate((slots, more))
    for end in range(301, 341):  # token-by-token (decode)
        cache.insert(full_toks[:end], full[:end])
    assert cache.num_nodes == 1 and cache.match(full_toks)[0].tolist() == full.tolist()
    # Once another request hit it, new content becomes a child instead.
    extra = pool.allocate(2)
    cache.insert(np.concatenate((full_toks, arr(1, 2))), np.concatenate((full, extra)))
    assert cache.num_nodes == 2


def test_evict_frees_exactly_and_never_shared_slots() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, debug=True)
    a = pool.allocate(10)
    toks = np.arange(10, dtype=np.int32)
    cache.insert(toks, a)
    pool.free(a[6:])  # the request keeps a[:6] (e.g. another one matched 6 tokens)
    assert cache.num_evictable_slots == 4
    assert cache.evict(3) == 3 and pool.refcount(a[7:]).tolist() == [0] * 3
    assert cache.num_evictable_slots == 1
    assert cache.evict(50) == 1 and cache.evict(50) == 0  # the rest is shared
    assert cache.num_cached_slots == 6 and pool.refcount(a[:6]).tolist() == [2] * 6
    pool.free(a[:6])  # the request finishes: the parked leaf is evictable again
    assert cache.num_evictable_slots == 6
    assert cache.evict(6) == 6 and pool.num_free == pool.num_usable
    assert cache.stats().namespaces == 0  # empty trees go


def test_interior_refcount_one_is_not_evictable_below_a_shared_leaf() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, debug=True)
    a = pool.allocate(4)
    toks = np.arange(6, dtype=np.int32)
    cache.insert(toks[:4], a)
    pool.free(a)  # first request gone: a only cached
    mine = pool.allocate(6)  # second request did not match; computed its own copy
    assert cache.insert(toks, mine) == 2  # caches its last 2 slots under a
    assert cache.num_evictable_slots == 0  # a[] is above the shared mine[4:]
    assert cache.evict(10) == 0
    pool.free(mine)
    assert cache.num_evictable_slots == 6 and cache.evict(10) == 6
    assert pool.num_free == pool.num_usable


def test_parent_becomes_leaf_and_is_evicted_after_children() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, debug=True)
    base = np.arange(5, dtype=np.int32)
    s = pool.allocate(5)
    cache.insert(base, s)
    cache.match(base)  # a hit: later content becomes children
    for t in (7, 8, 9):
        x = pool.allocate(1)
        cache.insert(np.append(base, t), np.append(s, x))
        pool.free(x)
    pool.free(s)
    assert cache.num_nodes == 4 and cache.num_evictable_slots == 8
    assert cache.evict(3) == 3 and cache.num_nodes == 1  # the three leaves first
    assert cache.evict(100) == 5 and cache.num_nodes == 0


def test_lru_victims_in_recency_order() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, "lru", debug=True)
    seqs = [arr(1, i, i) for i in (2, 3, 4)]
    for q in seqs:
        s = pool.allocate(3)
        cache.insert(q, s)
        pool.free(s)
    cache.match(seqs[0])
    cache.match(seqs[2])
    assert cache.evict(2) == 2  # seqs[1]'s leaf (2 tokens under the shared [1])
    assert cache.match(seqs[1])[1] == 1 and cache.match(seqs[0])[1] == 3


def test_lfu_prefers_evicting_the_least_hit() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, "lfu", debug=True)
    seqs = [arr(i, i) for i in (1, 2, 3)]
    for q in seqs:
        s = pool.allocate(2)
        cache.insert(q, s)
        pool.free(s)
    for _ in range(3):
        cache.match(seqs[0])
    cache.match(seqs[1])
    cache.match(seqs[1])
    cache.match(seqs[2])
    cache.match(seqs[0])  # seqs[2] has 1 hit and is not the oldest use
    assert cache.evict(2) == 2 and cache.match(seqs[2])[1] == 0
    assert cache.evict(2) == 2 and cache.match(seqs[1])[1] == 0


def test_namespaces_isolate() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, debug=True)
    toks = arr(1, 2, 3)
    a, b = pool.allocate(3), pool.allocate(3)
    assert cache.insert(toks, a, namespace="lora-1") == 3
    assert cache.match(toks)[1] == 0 and cache.match(toks, ("salt", 7))[1] == 0
    assert cache.insert(toks, b) == 3  # namespace None: its own copy
    assert cache.match(toks, "lora-1")[0].tolist() == a.tolist()
    assert cache.match(toks)[0].tolist() == b.tolist()
    assert cache.stats().namespaces == 2


def test_reset_releases_everything_and_bad_input_changes_nothing() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, "arc", debug=True)
    a = pool.allocate(6)
    cache.insert(arr(1, 2, 3, 4, 5, 6), a)
    with pytest.raises(ValueError):
        cache.insert(arr(1, 2), arr(1))
    free = pool.allocate(1)
    pool.free(free)
    with pytest.raises(ValueError):
        cache.insert(arr(9, 9), np.array([a[0], free[0]], np.int32), namespace="x")
    assert cache.stats().namespaces == 1 and cache.num_cached_slots == 6
    cache.check_invariants()
    pool.free(a)
    assert cache.reset() == 6 and pool.num_free == pool.num_usable
    assert cache.num_cached_slots == 0 and cache.num_nodes == 0
    cache.check_invariants()
    pool.check_invariants()


def test_check_invariants_catches_a_slot_cached_twice() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool)
    s = pool.allocate(2)
    cache.insert(arr(1, 2), s)
    cache.insert(arr(3), s[:1])  # caller bug: s[0] already caches token path [1]
    with pytest.raises(AssertionError, match="invariant violated"):
        cache.check_invariants()


def test_peek_does_not_count() -> None:
    pool = SlotPool(100, debug=True)
    cache = RadixCache(pool, "lfu", debug=True)
    s = pool.allocate(3)
    cache.insert(arr(1, 2, 3), s)
    cache.match(arr(1, 2, 3), touch=False)
    st_ = cache.stats()
    assert st_.queries == 0 and st_.hits == 0 and st_.shared == 3
    cache.match(arr(1, 2, 9))
    assert cache.stats().hits == 2 and cache.stats().hit_rate == pytest.approx(2 / 3)


# ---------------------------------------------------------------------- model check
@dataclass
class Req:
    ns: Hashable
    tokens: list[int]
    slots: list[int]  # slot of each token, the request holds a reference on each
    held_from: int = 0  # slots[:held_from] were released (sliding-window style)
    dead: bool = False


@dataclass
class Harness:
    """Drives a RadixCache and the brute-force model side by side."""

    policy: str
    num_slots: int = 90
    cached: dict[Key, int] = field(default_factory=dict)
    refs: Counter[int] = field(default_factory=Counter)  # callers' references
    reqs: list[Req] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pool = SlotPool(self.num_slots, stride=4)
        self.cache = RadixCache(self.pool, self.policy)

    # -- model helpers
    def model_match(self, ns: Hashable, tokens: list[int]) -> list[int]:
        out = []
        for j in range(1, len(tokens) + 1):
            s = self.cached.get((ns, tuple(tokens[:j])))
            if s is None:
                break
            out.append(s)
        return out

    def model_evictable(self) -> set[Key]:
        pinned: set[Key] = set()
        for key, s in self.cached.items():
            if self.refs[s] > 0:
                ns, t = key
                pinned.update((ns, t[:j]) for j in range(1, len(t) + 1))
        return set(self.cached) - pinned

    # -- operations
    def alloc(self, n: int) -> list[int] | None:
        if n > self.pool.num_free:
            self.evict(n - self.pool.num_free)
        got = self.pool.allocate(n)
        return None if got is None else got.tolist()

    def start(self, ns: Hashable, tokens: list[int], use_match: bool, upto: float) -> None:
        if use_match:
            got, k = self.cache.match(np.array(tokens, np.int32), ns)
            want = self.model_match(ns, tokens)
            assert got.tolist() == want and k == len(want)
            if k:
                self.pool.incref(got)
                self.refs.update(want)
            matched = want
        else:
            matched = []
        fresh = self.alloc(len(tokens) - len(matched))
        if fresh is None:  # no room even after eviction: give up
            if matched:
                self.pool.free(matched)
                self.refs.subtract(matched)
            return
        self.refs.update(fresh)
        req = Req(ns, list(tokens), matched + fresh)
        self.reqs.append(req)
        self.do_insert(req, int(round(upto * len(tokens))))

    def do_insert(self, req: Req, end: int) -> None:
        if req.held_from or req.dead:
            return
        new = 0
        for j in range(end):
            key = (req.ns, tuple(req.tokens[: j + 1]))
            if key not in self.cached:
                self.cached[key] = req.slots[j]
                new += 1
        got = self.cache.insert(
            np.array(req.tokens[:end], np.int32), np.array(req.slots[:end], np.int32), req.ns
        )
        assert got == new

    def extend(self, i: int, more: list[int]) -> None:
        req = self.reqs[i % len(self.reqs)]
        if req.held_from or not more:
            return
        fresh = self.alloc(len(more))
        if fresh is None:
            return
        self.refs.update(fresh)
        req.tokens += more
        req.slots += fresh
        self.do_insert(req, len(req.tokens))

    def finish(self, i: int) -> None:
        req = self.reqs.pop(i % len(self.reqs))
        held = req.slots[req.held_from :]
        if held:
            self.pool.free(held)
            self.refs.subtract(held)

    def drop_prefix(self, i: int, frac: float) -> None:
        req = self.reqs[i % len(self.reqs)]
        j = int(frac * len(req.slots))
        if j <= req.held_from:
            return
        self.pool.free(req.slots[req.held_from : j])
        self.refs.subtract(req.slots[req.held_from : j])
        req.held_from = j

    def evict(self, n: int) -> None:
        evictable = self.model_evictable()
        assert self.cache.num_evictable_slots == len(evictable)
        got = self.cache.evict(n)
        assert got == min(n, len(evictable))
        rc = self.pool.refcount()
        removed = {key for key, s in self.cached.items() if rc[s] == 0}
        assert len(removed) == got and removed <= evictable
        for key in removed:
            del self.cached[key]
        for ns, t in self.cached:  # no interior gap
            assert len(t) == 1 or (ns, t[:-1]) in self.cached

    def peek(self, ns: Hashable, tokens: list[int]) -> None:
        got, k = self.cache.match(np.array(tokens, np.int32), ns, touch=False)
        assert got.tolist() == self.model_match(ns, tokens)

    def check(self) -> None:
        self.cache.check_invariants()
        self.pool.check_invariants()
        expect = np.zeros(self.num_slots, np.int64)
        for s, c in self.refs.items():
            expect[s] += c
        for s in self.cached.values():
            expect[s] += 1
        assert np.array_equal(self.pool.refcount(), expect)
        assert self.cache.num_cached_slots == len(self.cached)
        assert self.cache.num_evictable_slots == len(self.model_evictable())

    def teardown(self) -> None:
        while self.reqs:
            self.finish(0)
        assert self.cache.num_evictable_slots == len(self.cached)
        self.cache.reset()
        assert self.pool.num_free == self.pool.num_usable
        self.pool.check_invariants()
        self.cache.check_invariants()


BASES = [[0, 1, 2, 0, 1, 2, 0, 1], [0, 1, 1, 0, 2, 2, 1, 0], [2, 2, 2, 1, 1, 0, 0, 2]]
NAMESPACES: list[Hashable] = [None, "lora-1"]


def draw_tokens(rng: np.random.Generator) -> list[int]:
    base = BASES[rng.integers(len(BASES))][: rng.integers(0, 9)]
    return base + rng.integers(0, 3, size=rng.integers(0 if base else 1, 10)).tolist()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(3))
def test_long_random_runs_match_the_model(policy: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    h = Harness(policy)
    for step in range(2500):
        op = rng.random()
        ns = NAMESPACES[int(rng.random() < 0.2)]
        if op < 0.35 or not h.reqs:
            h.start(ns, draw_tokens(rng), rng.random() < 0.8, rng.choice([0.0, 0.5, 1.0, 1.0]))
        elif op < 0.5:
            h.extend(int(rng.integers(1 << 30)), rng.integers(0, 3, rng.integers(1, 5)).tolist())
        elif op < 0.75:
            h.finish(int(rng.integers(1 << 30)))
        elif op < 0.8:
            h.drop_prefix(int(rng.integers(1 << 30)), rng.random())
        elif op < 0.92:
            h.evict(int(rng.integers(1, 30)))
        else:
            h.peek(ns, draw_tokens(rng))
        if step % 5 == 0:
            h.check()
    h.check()
    assert h.cache.stats().evicted > 0 and h.cache.stats().hits > 0
    h.teardown()


token_lists = st.lists(st.integers(0, 2), max_size=9)


class RadixMachine(RuleBasedStateMachine):
    """Hypothesis-driven operation sequences; the policy is a rule argument."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Harness | None = None

    def _h(self, policy: str) -> Harness:
        if self.h is None:
            self.h = Harness(policy, num_slots=60)
        return self.h

    @rule(
        policy=st.sampled_from(POLICIES),
        ns=st.sampled_from(NAMESPACES),
        base=st.integers(0, len(BASES) - 1),
        cut=st.integers(0, 8),
        extra=token_lists,
        use_match=st.booleans(),
        upto=st.sampled_from([0.0, 0.5, 1.0]),
    )
    def start(
        self, policy: str, ns: Hashable, base: int, cut: int, extra: list[int],
        use_match: bool, upto: float,
    ) -> None:  # fmt: skip
        tokens = BASES[base][:cut] + extra
        if tokens:
            self._h(policy).start(ns, tokens, use_match, upto)

    @precondition(lambda self: self.h is not None and self.h.reqs)
    @rule(i=st.integers(0, 100), more=st.lists(st.integers(0, 2), min_size=1, max_size=4))
    def extend(self, i: int, more: list[int]) -> None:
        self.h.extend(i, more)

    @precondition(lambda self: self.h is not None and self.h.reqs)
    @rule(i=st.integers(0, 100))
    def finish(self, i: int) -> None:
        self.h.finish(i)

    @precondition(lambda self: self.h is not None and self.h.reqs)
    @rule(i=st.integers(0, 100), frac=st.floats(0, 1))
    def drop_prefix(self, i: int, frac: float) -> None:
        self.h.drop_prefix(i, frac)

    @precondition(lambda self: self.h is not None)
    @rule(n=st.integers(1, 40))
    def evict(self, n: int) -> None:
        self.h.evict(n)

    @precondition(lambda self: self.h is not None)
    @rule(ns=st.sampled_from(NAMESPACES), base=st.integers(0, 2), extra=token_lists)
    def peek(self, ns: Hashable, base: int, extra: list[int]) -> None:
        self.h.peek(ns, BASES[base] + extra)

    @invariant()
    def consistent(self) -> None:
        if self.h is not None:
            self.h.check()

    def teardown(self) -> None:
        if self.h is not None:
            self.h.teardown()


RadixMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestRadixMachine = RadixMachine.TestCase
