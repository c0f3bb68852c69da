"""Tests for vllm_proxima.kv.slot_pool: unit cases plus a stateful model check."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

try:
    from vllm_proxima.kv.slot_pool import SlotPool
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima" / "src"))
    from vllm_proxima.kv.slot_pool import SlotPool


def lowest_run(free: np.ndarray, n: int) -> int:
    """Brute force: start of the lowest run of ``n`` True values, or -1."""
    run = 0
    for i, f in enumerate(free.tolist()):
        run = run + 1 if f else 0
        if run == n:
            return i - n + 1
    return -1


def pool_with_free(free: np.ndarray, **kw: int) -> SlotPool:
    """A pool whose free slots are exactly ``free`` (slot 0 reserved)."""
    pool = SlotPool(free.size, debug=True, **kw)
    everything = pool.allocate(pool.num_usable)
    assert everything is not None
    pool.free(everything[free[1:]])
    return pool


def snapshot(pool: SlotPool) -> tuple[np.ndarray, int]:
    return pool.refcount().copy(), pool.num_free


# ----------------------------------------------------------------------------- units
def test_counters_and_reserved() -> None:
    pool = SlotPool(100, num_reserved=3, debug=True)
    assert (pool.num_usable, pool.num_free, pool.num_used, pool.usage) == (
        97,
        97,
        0,
        0.0,
    )
    slots = pool.allocate(97)
    assert slots is not None and slots.min() == 3 and np.unique(slots).size == 97
    assert pool.usage == 1.0 and pool.allocate(1) is None
    for bad in ([0], [2], [-1]):
        with pytest.raises(ValueError):
            pool.free(bad)
    with pytest.raises(IndexError):
        pool.free([100])


def test_after_continues_in_place() -> None:
    pool = SlotPool(1000, debug=True)
    a = pool.allocate(5)
    b = pool.allocate(10, after=int(a[-1]))
    assert a.tolist() == list(range(1, 6)) and b.tolist() == list(range(6, 16))
    pool.allocate(1, after=int(b[-1]))  # occupies 16
    c = pool.allocate(3, after=int(a[-1]))  # 6 is taken: moves, with room
    assert SlotPool.runs(c) == 1 and c[0] == 17 + pool.stride


def test_fresh_request_takes_lowest_fitting_run() -> None:
    free = np.zeros(200, bool)
    free[10:15] = True  # 5: too short
    free[40:70] = True  # 30: fits
    free[100:200] = True
    pool = pool_with_free(free)
    assert pool.allocate(20).tolist() == list(range(40, 60))
    assert pool.allocate(5).tolist() == list(range(10, 15))
    assert pool.allocate(40).tolist() == list(range(100, 140))


@settings(max_examples=200, deadline=None)
@given(
    layout=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 70)), max_size=12),
    noise=st.lists(st.integers(0, 1000), max_size=20),
    ns=st.lists(st.integers(1, 70), min_size=1, max_size=6),
)
def test_fresh_allocation_is_exactly_the_lowest_run(
    layout: list[tuple[int, int]], noise: list[int], ns: list[int]
) -> None:
    free = np.concatenate([[False]] + [[False] * g + [True] * r for g, r in layout] + [[False]])
    free[[i % free.size for i in noise if i % free.size]] ^= True  # used <-> free
    pool = pool_with_free(free, stride=1)
    for n in ns:
        free = pool.refcount() == 0
        free[0] = False
        expect, got = lowest_run(free, n), pool.allocate(n)
        if n > free.sum():
            assert got is None
        elif expect >= 0:
            assert got.tolist() == list(range(expect, expect + n))
        else:  # scattered fallback
            assert np.all(free[got]) and np.unique(got).size == n


def test_double_free_raises_without_change() -> None:
    pool = SlotPool(50, debug=True)
    a = pool.allocate(4)
    pool.free(a[:2])
    before = snapshot(pool)
    with pytest.raises(ValueError, match="double free"):
        pool.free(a)
    with pytest.raises(ValueError, match="double free"):
        pool.free([a[2], a[2]])  # refcount 1, freed twice in one call
    with pytest.raises(ValueError):
        pool.incref(a[:1])  # a free slot cannot be shared
    after = snapshot(pool)
    assert np.array_equal(before[0], after[0]) and before[1] == after[1]


def test_duplicates_in_one_call_count_per_occurrence() -> None:
    pool = SlotPool(50, debug=True)
    a = pool.allocate(3)
    pool.incref([a[0], a[0], a[1]])
    assert pool.refcount(a).tolist() == [3, 2, 1]
    pool.free(np.array([a[0], a[1], a[0], a[2]]))
    assert pool.refcount(a).tolist() == [1, 1, 0] and pool.num_free == 47
    pool.free([a[1], a[0]])
    assert pool.num_free == 49


def test_shortage_returns_none_without_change() -> None:
    pool = SlotPool(20, debug=True)
    pool.allocate(15)
    before = snapshot(pool)
    assert pool.allocate(5) is None
    after = snapshot(pool)
    assert np.array_equal(before[0], after[0]) and before[1] == after[1]
    assert pool.allocate(4) is not None and pool.num_free == 0


def test_moved_requests_get_room_and_stride_one_packs() -> None:
    # 20 packed 3-slot prompts, then one decode slot each (as the KV manager's decode path).
    pool = SlotPool(10_000, stride=8, debug=True)
    lasts = [int(pool.allocate(3)[-1]) for _ in range(20)]
    step = np.array([int(pool.allocate(1, after=last)[0]) for last in lasts])
    assert step[-1] == lasts[-1] + 1  # the last prompt continues in place
    assert np.all(np.diff(step[:-1]) == 9)  # the others move, each with 8 free slots to grow
    pool = SlotPool(10_000, stride=1, debug=True)
    lasts = [int(pool.allocate(3)[-1]) for _ in range(20)]
    step = np.array([int(pool.allocate(1, after=last)[0]) for last in lasts])
    assert np.all(np.diff(step) == 1)  # stride 1: moved requests pack


def test_runs_metric() -> None:
    assert SlotPool.runs([]) == 0 and SlotPool.runs([7]) == 1
    assert SlotPool.runs([1, 2, 3, 7, 8, 4]) == 3


def test_stack_rebuild_and_hints_survive_churn() -> None:
    pool = SlotPool(64, stride=4, debug=True)
    rng = np.random.default_rng(0)
    for _ in range(300):  # runs leave stale stack entries; frees push again
        a = pool.allocate(int(rng.integers(1, 40)))
        b = pool.allocate(int(rng.integers(1, 20)), after=int(a[-1]))
        pool.free(rng.permutation(np.concatenate([a, b])))
    assert pool.num_free == 63


# ------------------------------------------------------------------------ stateful
class PoolMachine(RuleBasedStateMachine):
    """Random allocate / free / incref against a refcount model."""

    handles = Bundle("handles")  # each: the slots of one allocation (a tuple)

    @initialize(
        num_slots=st.integers(2, 160),
        reserved=st.integers(1, 3),
        stride=st.sampled_from([1, 2, 4, 16]),
    )
    def setup(self, num_slots: int, reserved: int, stride: int) -> None:
        self.pool = SlotPool(
            num_slots, num_reserved=min(reserved, num_slots), stride=stride, debug=True
        )
        self.model = np.zeros(num_slots, np.int64)
        self.r = self.pool.num_reserved
        self.dead: list[np.ndarray] = []  # slot sets freed earlier

    def _take(self, slots: np.ndarray) -> None:
        assert slots.dtype == np.int32
        assert np.unique(slots).size == slots.size, "slot handed out twice"
        assert slots.size == 0 or slots.min() >= self.r, "reserved slot handed out"
        assert np.all(self.model[slots] == 0), "slot in use handed out"
        self.model[slots] = 1

    def _free_model(self) -> np.ndarray:
        free = self.model == 0
        free[: self.r] = False
        return free

    @rule(target=handles, n=st.integers(0, 40), prev=st.none() | handles)
    def allocate(self, n: int, prev: tuple[int, ...] | None):
        after = prev[-1] if prev else -1
        free = self._free_model()
        slots = self.pool.allocate(n, after)
        if n > free.sum():
            assert slots is None
            return multiple()
        self._take(slots)
        if n == 0:
            assert slots.size == 0
        elif after >= 0 and after + n < free.size and free[after + 1 : after + 1 + n].all():
            assert slots.tolist() == list(range(after + 1, after + 1 + n))
        elif after < 0 and lowest_run(free, n) >= 0:
            assert slots[:1].tolist() == [lowest_run(free, n)] and SlotPool.runs(slots) <= 1
        elif lowest_run(free, n) >= 0:
            assert SlotPool.runs(slots) <= 1
        return tuple(slots.tolist())

    @rule(target=handles, h=handles)
    def share(self, h: tuple[int, ...]):
        if not h or np.any(self.model[list(h)] == 0):
            return multiple()
        self.pool.incref(np.array(h))
        np.add.at(self.model, list(h), 1)
        return h

    def _free(self, held: np.ndarray) -> None:
        if np.any(np.bincount(held, minlength=self.model.size) > self.model):
            before = self.pool.refcount().copy()
            with pytest.raises(ValueError, match="double free"):
                self.pool.free(held)
            assert np.array_equal(before, self.pool.refcount())
            return
        self.pool.free(held)
        np.subtract.at(self.model, held, 1)
        self.dead.append(held)

    @rule(h=consumes(handles))
    def free(self, h: tuple[int, ...]) -> None:
        self._free(np.array(h, np.int64))

    @rule(h1=consumes(handles), h2=consumes(handles))
    def free_two_at_once(self, h1: tuple[int, ...], h2: tuple[int, ...]) -> None:
        self._free(np.random.default_rng(len(h1)).permutation(np.array(h1 + h2, np.int64)))

    @rule(data=st.data())
    def double_free(self, data: st.DataObject) -> None:
        if self.dead:
            held = data.draw(st.sampled_from(self.dead))
            gone = held[self.model[held] == 0]
            if gone.size:
                self._free(gone)  # must raise
                assert np.all(self.model[held] >= 0)

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "pool"):
            return
        assert np.array_equal(self.pool.refcount(), self.model)
        assert self.pool.num_free == self._free_model().sum()
        assert self.pool.num_free + self.pool.num_used == self.pool.num_usable
        self.pool.check_invariants()


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
