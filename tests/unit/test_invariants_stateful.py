"""Stateful property tests of the token layout: SlotPool and ProximaKVCacheManager.

Hypothesis drives random runs of operations and checks, after every one:

* ``SlotPool``: ``check_invariants()`` and a reference model of every slot's refcount (which
  allocations and increfs hold it), all-or-nothing allocation exactly when the model says the
  slots are (not) there, in-place growth when the slots after a request's last one are free, and
  that double frees and increfs of free slots raise without changing anything.
* ``ProximaKVCacheManager`` with prefix sharing: requests are admitted through the prefix cache
  (chunked prefill), decode, are preempted on shortage and resumed, finish, abort, and the cache
  is reset. Checked: the pool's and radix cache's invariants; every slot's refcount is the
  requests holding it plus one if the cache holds it; each request holds exactly its computed
  tokens; the KV a slot holds (modelled as a hash of the token path it was computed for, and the
  cache namespace) is what every request using that slot expects, so a prefix hit never hands out
  another sequence's KV or a slot still in use; the admission's residency view (held, alone,
  shared) matches the model; after freeing everything and ``reset_prefix_cache`` the pool is free.

Size: ``max_examples`` 30 x ``stateful_step_count`` 50 per machine in CI (deterministic). Set
``PROXIMA_INVARIANT_OPS`` to the operations wanted per machine (random seeds then);
``scripts/nightly_invariants.sh`` runs 10^6 in total.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from vllm_proxima.kv.slot_pool import SlotPool

CI_EXAMPLES, CI_STEPS = 30, 50
LONG_STEPS = 200  # steps per example when PROXIMA_INVARIANT_OPS scales the run up


def target_ops() -> int:
    """Operations per machine asked for by ``PROXIMA_INVARIANT_OPS`` (0: CI size)."""
    return int(os.environ.get("PROXIMA_INVARIANT_OPS", "0"))


class CountingMachine(RuleBasedStateMachine):
    """A state machine whose rules count the operations they run."""

    ops: ClassVar[int] = 0


def run_machine(machine: type[CountingMachine]) -> None:
    """CI size (deterministic) by default; else at least ``target_ops()`` operations, counted
    by the machine's ``ops`` (Hypothesis may end a run before its step count), random seeds."""
    common: dict[str, Any] = {
        "deadline": None,
        "database": None,
        "suppress_health_check": list(HealthCheck),
    }
    target = target_ops()
    if target <= 0:
        ci = settings(max_examples=CI_EXAMPLES, stateful_step_count=CI_STEPS, derandomize=True)
        run_state_machine_as_test(machine, settings=settings(ci, **common))
        return
    while machine.ops < target:
        examples = max(1, math.ceil((target - machine.ops) / LONG_STEPS))
        run = settings(max_examples=min(examples, 1000), stateful_step_count=LONG_STEPS, **common)
        run_state_machine_as_test(machine, settings=run)


def pick(items: list[Any], i: int) -> Any:
    return items[i % len(items)]


# --------------------------------------------------------------------------------- SlotPool


class SlotPoolMachine(CountingMachine):
    """Random allocate / free / incref runs against a refcount model."""

    def __init__(self) -> None:
        super().__init__()
        self.pool: SlotPool | None = None
        self.model = np.zeros(0, dtype=np.int64)  # expected refcount per slot
        self.holdings: list[np.ndarray] = []  # each: slots one owner holds (repeats allowed)

    @initialize(
        num_slots=st.one_of(st.integers(1, 80), st.sampled_from([127, 128, 129, 1000])),
        reserved=st.integers(0, 2),
        stride=st.sampled_from([1, 2, 4, 64]),
    )
    def make_pool(self, num_slots: int, reserved: int, stride: int) -> None:
        reserved = min(reserved, num_slots)
        self.pool = SlotPool(num_slots, num_reserved=reserved, stride=stride)
        self.model = np.zeros(num_slots, dtype=np.int64)

    @property
    def p(self) -> SlotPool:
        assert self.pool is not None
        return self.pool

    def model_free(self) -> int:
        return int(np.count_nonzero(self.model[self.p.num_reserved :] == 0))

    def take(self, slots: np.ndarray) -> None:
        """The model's side of a successful allocation of ``slots``."""
        assert slots.dtype == np.int32
        assert np.unique(slots).size == slots.size, f"slot handed out twice: {slots}"
        if slots.size:
            assert slots.min() >= self.p.num_reserved and slots.max() < self.p.num_slots
            assert not self.model[slots].any(), "allocated a slot in use"
        self.model[slots] = 1

    def last_of(self, i: int) -> int:
        held = [h for h in self.holdings if h.size]
        return int(pick(held, i)[-1]) if held and i % 3 else -1

    @rule(n=st.integers(0, 40), i=st.integers(0, 1 << 16))
    def allocate(self, n: int, i: int) -> None:
        SlotPoolMachine.ops += 1
        after = self.last_of(i)
        in_place = after >= 0 and after + n < self.p.num_slots
        in_place = in_place and not self.model[after + 1 : after + 1 + n].any()
        slots = self.p.allocate(n, after)
        if n > self.model_free():
            assert slots is None
            return
        assert slots is not None and slots.size == n
        self.take(slots)
        if in_place and n:
            assert slots[0] == after + 1 and SlotPool.runs(slots) == 1, "did not grow in place"
        self.holdings.append(slots.astype(np.int64))

    @precondition(lambda self: self.holdings)
    @rule(i=st.integers(0, 1 << 16))
    def free(self, i: int) -> None:
        SlotPoolMachine.ops += 1
        held = self.holdings.pop(i % len(self.holdings))
        self.p.free(held)
        np.subtract.at(self.model, held, 1)

    @precondition(lambda self: any(h.size for h in self.holdings))
    @rule(i=st.integers(0, 1 << 16), cut=st.integers(1, 64), twice=st.booleans())
    def incref(self, i: int, cut: int, twice: bool) -> None:
        """Another owner shares a prefix of a holding (repeated ids: two references each)."""
        SlotPoolMachine.ops += 1
        shared = pick([h for h in self.holdings if h.size], i)[:cut]
        if twice:
            shared = np.concatenate((shared, shared))
        self.p.incref(shared)
        np.add.at(self.model, shared, 1)
        self.holdings.append(shared)

    @rule(i=st.integers(0, 1 << 16), incref=st.booleans())
    def misuse_free_slot(self, i: int, incref: bool) -> None:
        """Freeing or increfing a free slot raises ValueError and changes nothing."""
        SlotPoolMachine.ops += 1
        free = np.flatnonzero(self.model == 0)
        free = free[free >= self.p.num_reserved]
        if not free.size:
            return
        before = self.p.refcount().copy()
        with pytest.raises(ValueError):
            (self.p.incref if incref else self.p.free)(np.array([free[i % free.size]]))
        assert np.array_equal(self.p.refcount(), before)

    @invariant()
    def matches_model(self) -> None:
        if self.pool is None:
            return
        self.p.check_invariants()
        assert np.array_equal(self.p.refcount(), self.model), "refcounts differ from the model"
        assert self.p.num_free == self.model_free()
        assert self.p.num_used + self.p.num_free == self.p.num_usable

    def teardown(self) -> None:
        if self.pool is None:
            return
        for held in self.holdings:
            self.p.free(held)
        self.p.check_invariants()
        assert self.p.num_free == self.p.num_usable


def test_slot_pool_stateful() -> None:
    SlotPoolMachine.ops = 0
    run_machine(SlotPoolMachine)
    print(f"SlotPool: {SlotPoolMachine.ops} operations")


# ----------------------------------------------------------------- ProximaKVCacheManager

_MASK = (1 << 64) - 1
PREFIXES = (
    (), tuple(range(10, 27)), tuple(range(10, 40)), tuple(range(50, 57)),
)  # fmt: skip
SALTS = (None, None, "tenant-b")
MAX_MODEL_LEN = 160


def path_hashes(tokens: list[int], salt: str | None) -> list[int]:
    """Hash of each token path ``tokens[:i + 1]`` in a namespace: the KV a slot at i holds."""
    h = hash(salt) & _MASK
    out = []
    for t in tokens:
        h = (h * 0x100000001B3 + t + 1) & _MASK
        out.append(h)
    return out


class Req:
    """A request as the scheduler drives it, with the KV each position must hold."""

    def __init__(self, request: Any, salt: str | None, max_out: int, chunk: int) -> None:
        self.r = request
        self.salt = salt
        self.max_out = max_out
        self.chunk = chunk
        self.kv = path_hashes(list(request.all_token_ids), salt)

    @property
    def rid(self) -> str:
        return str(self.r.request_id)

    def append(self, token: int) -> None:
        self.r.append_output_token_ids(token)
        h = self.kv[-1] if self.kv else hash(self.salt) & _MASK
        self.kv.append((h * 0x100000001B3 + token + 1) & _MASK)


class ManagerMachine(CountingMachine):
    """Requests through ProximaKVCacheManager with token-level prefix sharing."""

    seen: ClassVar[Counter[str]] = (
        Counter()
    )  # hits, preemptions, refused admissions (the run's coverage)

    def __init__(self) -> None:
        super().__init__()
        self.m: Any = None
        self.running: list[Req] = []
        self.waiting: list[Req] = []  # preempted, to resume
        self.content = np.zeros(0, dtype=np.uint64)  # the KV path hash each slot holds

    @initialize(
        num_slots=st.sampled_from([65, 200, 401]),
        evict=st.sampled_from(["lru", "lfu", "arc"]),
    )
    def make_manager(self, num_slots: int, evict: str) -> None:
        from vllm_proxima.kv.manager import ProximaKVCacheManager

        self.m = ProximaKVCacheManager(
            num_slots=num_slots,
            max_model_len=MAX_MODEL_LEN,
            prefix_sharing=True,
            evict=evict,
            debug=True,
        )
        self.content = np.zeros(num_slots, dtype=np.uint64)

    def written(self, q: Req, start: int, end: int) -> None:
        """Positions ``start:end`` of ``q`` were just computed into its new slots."""
        slots = np.asarray(self.m.get_block_ids(q.rid)[0][start:end], dtype=np.int64)
        self.content[slots] = np.asarray(q.kv[start:end], dtype=np.uint64)

    def admit(self, q: Req) -> bool:
        """What the scheduler does for a waiting request: look up, allocate a chunk, compute."""
        r = q.r
        blocks, hit, _ = self.m.get_computed_blocks(r)
        ManagerMachine.seen["hit"] += bool(hit)
        if hit:  # the hit's slots hold exactly this request's KV for those positions
            got = self.content[np.asarray(blocks.slots, dtype=np.int64)]
            assert np.array_equal(got, np.asarray(q.kv[:hit], dtype=np.uint64)), "wrong KV hit"
        new = min(q.chunk, r.num_tokens - hit)
        before = self.m.pool.refcount().copy()
        out = self.m.allocate_slots(
            r, new, num_new_computed_tokens=hit, new_computed_blocks=blocks if hit else None
        )
        if out is None:  # nothing taken; the hit's references are given back
            ManagerMachine.seen["refused"] += 1
            assert self.m.num_slots_of(q.rid) == 0
            hit_slots = np.asarray(blocks.slots, dtype=np.int64)[:hit]
            assert np.array_equal(self.m.pool.refcount(hit_slots), before[hit_slots])
            return False
        r.num_computed_tokens = hit + new
        self.written(q, hit, hit + new)
        self.sample_if_done(q)
        return True

    def sample_if_done(self, q: Req) -> None:
        r = q.r
        if r.num_computed_tokens == r.num_tokens:  # prefill done: a token is sampled
            q.append(3 + (r.num_tokens * 7 + len(q.kv)) % 5)

    def preempt(self, q: Req) -> None:
        ManagerMachine.seen["preempted"] += 1
        self.m.free(q.r)
        q.r.num_computed_tokens = 0
        q.r.num_preemptions += 1
        self.running.remove(q)
        self.waiting.append(q)

    @rule(
        prefix=st.sampled_from(PREFIXES),
        suffix=st.lists(st.integers(3, 7), min_size=1, max_size=40),
        salt=st.sampled_from(SALTS),
        max_out=st.integers(1, 30),
        chunk=st.sampled_from([4, 16, 1000]),
    )
    def new_request(
        self, prefix: tuple[int, ...], suffix: list[int], salt: str | None, max_out: int, chunk: int
    ) -> None:
        from tests.unit.utils import make_request

        ManagerMachine.ops += 1
        tokens = [*prefix, *suffix]
        r = make_request(len(tokens), max_tokens=max_out)
        r.prompt_token_ids[:] = tokens
        r._all_token_ids[:] = tokens
        r.cache_salt = salt
        q = Req(r, salt, max_out, chunk)
        if self.admit(q):
            self.running.append(q)

    @precondition(lambda self: self.waiting)
    @rule(i=st.integers(0, 1 << 16))
    def resume(self, i: int) -> None:
        ManagerMachine.ops += 1
        q = pick(self.waiting, i)
        if self.admit(q):
            self.waiting.remove(q)
            self.running.append(q)

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 1 << 16))
    def step(self, i: int) -> None:
        """One engine step of a running request: its next prefill chunk or one decode token."""
        ManagerMachine.ops += 1
        q = pick(self.running, i)
        r = q.r
        done = r.num_computed_tokens
        if r.num_output_tokens >= q.max_out or r.num_tokens >= MAX_MODEL_LEN:
            return self.finish_one(q)
        new = min(q.chunk, r.num_tokens - done)
        if self.m.allocate_slots(r, new) is None:
            return self.preempt(q)
        r.num_computed_tokens = done + new
        self.written(q, done, done + new)
        self.sample_if_done(q)

    def finish_one(self, q: Req) -> None:
        self.m.free(q.r)
        self.running.remove(q)

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 1 << 16))
    def finish(self, i: int) -> None:
        ManagerMachine.ops += 1
        self.finish_one(pick(self.running, i))

    @precondition(lambda self: self.running or self.waiting)
    @rule(i=st.integers(0, 1 << 16))
    def abort(self, i: int) -> None:
        ManagerMachine.ops += 1
        q = pick(self.running + self.waiting, i)
        self.m.free(q.r)
        (self.running if q in self.running else self.waiting).remove(q)

    @rule()
    def reset_prefix_cache(self) -> None:
        """As the scheduler's ``reset_prefix_cache(reset_running_requests=True)``: preempt every
        running request, then reset; nothing is held or cached afterwards."""
        ManagerMachine.ops += 1
        for q in list(self.running):
            self.preempt(q)
        assert self.m.reset_prefix_cache()
        assert self.m.pool.num_free == self.m.pool.num_usable, "slots leaked"

    @invariant()
    def consistent(self) -> None:
        if self.m is None:
            return
        m, pool = self.m, self.m.pool
        pool.check_invariants()
        m.cache.check_invariants()
        holds = np.zeros(pool.num_slots, dtype=np.int64)
        for q in self.running:
            slots = np.asarray(m.get_block_ids(q.rid)[0], dtype=np.int64)
            assert slots.size == q.r.num_computed_tokens, "holds other than its computed tokens"
            assert np.unique(slots).size == slots.size, "a slot twice in one request"
            got, want = self.content[slots], np.asarray(q.kv[: slots.size], dtype=np.uint64)
            assert np.array_equal(got, want), "a request's slot holds other KV"
            holds[slots] += 1
        for q in self.waiting:
            assert m.num_slots_of(q.rid) == 0
        cache_refs = pool.refcount().astype(np.int64) - holds
        assert cache_refs.min() >= 0 and cache_refs.max() <= 1, "refcount != holders + cache"
        assert int(cache_refs.sum()) == m.cache.num_cached_slots
        self.check_residency(holds)

    def check_residency(self, holds: np.ndarray) -> None:
        """The admission's view of the residents against the model."""
        ids = [q.rid for q in self.running]
        res = self.m.residency_index.residency(ids)
        for k, q in enumerate(self.running):
            slots = np.asarray(self.m.get_block_ids(q.rid)[0], dtype=np.int64)
            assert res.held[k] == slots.size
            assert res.alone[k] == int(np.count_nonzero(holds[slots] == 1)), "alone"
        assert res.shared == int(np.count_nonzero(holds >= 2)), "shared"

    def teardown(self) -> None:
        if self.m is None:
            return
        for q in self.running + self.waiting:
            self.m.free(q.r)
        assert not self.m.req_slots
        assert self.m.reset_prefix_cache()
        self.m.pool.check_invariants()
        assert self.m.pool.num_free == self.m.pool.num_usable, "slots leaked"
        assert self.m.usage == 0.0


def test_kv_manager_stateful() -> None:
    pytest.importorskip("vllm")
    ManagerMachine.ops = 0
    ManagerMachine.seen.clear()
    run_machine(ManagerMachine)
    print(f"ProximaKVCacheManager: {ManagerMachine.ops} operations, {dict(ManagerMachine.seen)}")


# ------------------------------------------------------------------------ known issues


def _request(tokens: list[int]) -> Any:
    from tests.unit.utils import make_request

    r = make_request(len(tokens))
    r.prompt_token_ids[:] = tokens
    r._all_token_ids[:] = tokens
    return r


def _admitted(m: Any, tokens: list[int]) -> Any:
    r = _request(tokens)
    blocks, hit, _ = m.get_computed_blocks(r)
    new = m.allocate_slots(
        r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
    )
    assert new is not None
    r.num_computed_tokens = r.num_tokens
    return r


def test_reset_prefix_cache_refuses_while_requests_hold_kv() -> None:
    """As upstream's BlockPool: no reset while requests hold KV (docs/faults.md, issue 2)."""
    pytest.importorskip("vllm")
    from vllm_proxima.kv.manager import ProximaKVCacheManager

    m = ProximaKVCacheManager(num_slots=401, max_model_len=300, prefix_sharing=True)
    prompt = list(range(10, 40))
    running = _admitted(m, prompt)
    assert not m.reset_prefix_cache()  # e.g. after a weight update (RLHF): refused
    assert m.get_computed_blocks(_request([*prompt, 5]))[1] == 30  # nothing was reset
    m.free(running)  # the scheduler preempts first (reset_running_requests=True) ...
    assert m.reset_prefix_cache()  # ... and then the reset succeeds
    _, hit, _ = m.get_computed_blocks(_request([*prompt, 5]))
    assert hit == 0, f"a hit of {hit} pre-reset tokens"
    assert m.pool.num_free == m.pool.num_usable
