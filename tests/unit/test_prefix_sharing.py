"""Token-level prefix sharing through the KV manager (the radix cache over shared slots)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm")

from tests.unit.utils import make_request  # noqa: E402
from vllm_proxima.kv.manager import ProximaKVCacheManager  # noqa: E402


def make_manager(num_slots: int = 401, **kw) -> ProximaKVCacheManager:
    kw.setdefault("prefix_sharing", True)
    return ProximaKVCacheManager(num_slots=num_slots, max_model_len=300, debug=True, **kw)


def request(tokens: list[int], max_tokens: int = 8, salt: str | None = None):
    r = make_request(len(tokens), max_tokens=max_tokens)
    r.prompt_token_ids[:] = tokens
    r._all_token_ids[:] = tokens
    if salt is not None:
        r.cache_salt = salt
    return r


def admit(m: ProximaKVCacheManager, r) -> tuple[np.ndarray, int]:
    """What the scheduler does for a waiting request: look up, allocate, compute."""
    blocks, hit, _ = m.get_computed_blocks(r)
    new = m.allocate_slots(
        r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
    )
    assert new is not None
    r.num_computed_tokens = r.num_tokens
    return np.asarray(m.get_block_ids(r.request_id)[0]), hit


def test_shares_exactly_the_common_tokens_at_any_length() -> None:
    m = make_manager()
    system = list(range(100, 137))  # 37 tokens: not a multiple of 16
    a = request(system + [1, 2, 3])
    b = request(system + [9, 9])
    slots_a, hit_a = admit(m, a)
    slots_b, hit_b = admit(m, b)
    assert hit_a == 0 and hit_b == 37
    assert (slots_b[:37] == slots_a[:37]).all()
    assert not set(slots_b[37:].tolist()) & set(slots_a.tolist())
    # Shared slots are held by both requests and the cache.
    assert (m.pool.refcount(slots_a[:37]) == 3).all()


def test_the_last_prompt_token_is_always_recomputed() -> None:
    m = make_manager()
    p = list(range(5, 25))
    admit(m, request(p))
    _, hit = admit(m, request(p))
    assert hit == len(p) - 1


def test_next_chat_turn_reuses_prompt_and_answer() -> None:
    m = make_manager()
    turn1 = request(list(range(50, 90)))
    admit(m, turn1)
    for tok in (7, 8, 9, 10):  # decode four tokens
        turn1.append_output_token_ids(tok)
        assert m.allocate_slots(turn1, 1) is not None
        turn1.num_computed_tokens += 1
    m.free(turn1)  # finished: prompt and answer go to the cache
    history = list(turn1.all_token_ids)
    turn2 = request(history + [3, 4, 5])
    _, hit = admit(m, turn2)
    assert hit == turn1.num_computed_tokens


def test_namespaces_isolate() -> None:
    m = make_manager()
    p = list(range(10, 60))
    admit(m, request(p, salt="alice"))
    _, hit = admit(m, request(p, salt="bob"))
    assert hit == 0


def test_eviction_frees_only_unreferenced_cached_slots() -> None:
    m = make_manager(num_slots=121)  # 120 usable
    running = request(list(range(1, 51)))  # 50 slots, stays
    slots_running, _ = admit(m, running)
    done = request(list(range(200, 260)))  # 60 slots, finishes -> cached
    admit(m, done)
    m.free(done)
    assert m.pool.num_free == 10
    newcomer = request(list(range(500, 540)))  # needs 40: 30 must be evicted
    slots_new, hit = admit(m, newcomer)
    assert hit == 0
    assert (m.pool.refcount(slots_running) >= 1).all()  # never evicted
    assert m.cache.stats().evicted >= 30


def test_failed_allocation_releases_the_hit() -> None:
    m = make_manager(num_slots=61)
    p = list(range(1, 41))
    first = request(p)
    admit(m, first)  # 40 slots, stays running
    second = request(p + list(range(100, 140)))  # hit 40, needs 40 more: only 20 free
    blocks, hit, _ = m.get_computed_blocks(second)
    assert hit == 40
    before = m.pool.refcount(blocks.slots).copy()
    assert (
        m.allocate_slots(second, 40, num_new_computed_tokens=hit, new_computed_blocks=blocks)
        is None
    )
    assert (m.pool.refcount(blocks.slots) == before).all()


def test_everything_returns_to_the_pool_after_reset() -> None:
    rng = np.random.default_rng(0)
    m = make_manager(num_slots=2001)
    prefixes = [rng.integers(3, 900, size=int(n)).tolist() for n in (17, 33, 50)]
    live = []
    for i in range(60):
        toks = prefixes[i % 3] + rng.integers(3, 900, size=int(rng.integers(1, 30))).tolist()
        r = request(toks)
        blocks, hit, _ = m.get_computed_blocks(r)
        if (
            m.allocate_slots(
                r, r.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
            )
            is None
        ):
            continue
        r.num_computed_tokens = r.num_tokens
        live.append(r)
        if len(live) > 10:
            m.free(live.pop(int(rng.integers(len(live)))))
    for r in live:
        m.free(r)
    assert m.cache.stats().hits > 0
    m.reset_prefix_cache()
    assert m.pool.num_free == m.pool.num_usable
    m.pool.check_invariants()


def test_usage_counts_evictable_cache_as_free() -> None:
    m = make_manager()
    r = request(list(range(1, 101)))
    admit(m, r)
    assert m.usage == pytest.approx(100 / 400)
    m.free(r)  # all 100 now only cached
    assert m.usage == pytest.approx(0.0)


def test_usage_recount_on_a_large_pool_is_time_budgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above 1k slots the O(num_slots) evictable recount waits 50x its own duration."""
    from vllm_proxima.kv import manager as manager_mod

    now = [100.0]

    def monotonic() -> float:
        now[0] += 0.001  # every reading 1 ms later: a recount "takes" 1 ms
        return now[0]

    monkeypatch.setattr(manager_mod.time, "monotonic", monotonic)
    m = ProximaKVCacheManager(num_slots=4097, max_model_len=300, prefix_sharing=True)
    r = request(list(range(1, 101)))
    other = request(list(range(200, 250)))
    admit(m, r)
    admit(m, other)
    assert m.usage == pytest.approx(150 / 4096)  # changed: recounted, next one in 50 ms
    m.free(r)  # its 100 only cached now
    assert m.usage == pytest.approx(150 / 4096)  # within the budget: the last count stands
    now[0] += 0.05
    assert m.usage == pytest.approx(50 / 4096)  # recounted
    m.free(other)
    assert m.usage == 0.0  # idle: exact at once, whatever the budget (docs/faults.md, issue 1)


def test_usage_is_exact_when_idle_on_a_large_pool() -> None:
    """docs/faults.md, issue 1: the last request's free left the gauge stale while idle."""
    m = ProximaKVCacheManager(num_slots=4097, max_model_len=1024, prefix_sharing=True)
    r = request(list(range(1, 101)))
    admit(m, r)
    assert m.usage == pytest.approx(100 / 4096)
    m.free(r)  # idle: every used slot is cached and evictable
    assert m.usage == 0.0
    assert m.cache is not None and m.cache.num_evictable_slots == 100


def test_lookup_stats_count_each_admission_once_and_whole() -> None:
    """proxima:prefix_{query,hit}_tokens: every admitted request's lookup (all but its
    last token) counts once, however often it was peeked at while waiting."""
    m = make_manager()
    system = list(range(100, 137))
    a = request(system + [1, 2, 3])  # 40 tokens: looks up 39, hits 0
    b = request(system + [9, 9])  # 39 tokens: looks up 38, hits 37
    admit(m, a)
    for _ in range(3):  # b waits a few steps: peeks are not counted
        m.get_computed_blocks(b)
    admit(m, b)
    st = m.cache.stats()
    assert (st.queries, st.hits) == (39 + 38, 37)
    stats = m.cache_stats()
    assert (stats["prefix_queries_tokens"], stats["prefix_hits_tokens"]) == (77, 37)


def test_residency_and_hit_holders_see_shared_prefixes() -> None:
    """What the admission policy reads: slots each resident holds alone, and for a
    waiting request's hit, how many residents hold it already and who alone."""
    m = make_manager()
    system = list(range(100, 140))  # 40 tokens
    a = request(system + [1, 2, 3])
    admit(m, a)
    res = m.residency_index.residency([a.request_id])
    assert res.held.tolist() == [43] and res.alone.tolist() == [43]  # cached, only a holds
    assert res.shared == 0
    handle_a = int(res.handles[0])
    b = request(system + [7, 7])
    hit_b, n, _ = m.get_computed_blocks(b)
    assert n == 40
    pinned, sole = m.residency_index.hit_holders(hit_b.slots)
    assert pinned == 40  # a holds all of them
    assert sole.tolist() == [handle_a] * 40  # a alone
    admit(m, b)
    # Now shared: neither holds the 40 system-prompt slots alone.
    res = m.residency_index.residency([a.request_id, b.request_id])
    assert res.held.tolist() == [43, 42] and res.alone.tolist() == [3, 2]
    assert res.shared == 40  # once, not once per holder
    c = request(system + [8])
    hit_c, _, _ = m.get_computed_blocks(c)
    pinned, sole = m.residency_index.hit_holders(hit_c.slots)
    assert pinned == 40 and sole.size == 0  # two residents hold them: in S already
    # A finished request's cached slots are nobody's: a hit on them pins new slots.
    handle_b = int(m.residency_index.residency([b.request_id]).handles[0])
    m.free(a)
    m.free(b)
    res = m.residency_index.residency([a.request_id, b.request_id])
    assert res.shared == 0 and res.handles.tolist() == [-1, -1]
    hit_c, _, _ = m.get_computed_blocks(c)
    assert m.residency_index.hit_holders(hit_c.slots)[0] == 0
    # Handles are per residency: readmitted, a request gets a new one.
    admit(m, b)
    assert int(m.residency_index.residency([b.request_id]).handles[0]) > handle_b


@pytest.mark.parametrize("num_slots", [401, 100_001])  # pool pass; gather (few offered)
def test_residency_paths_agree(num_slots: int) -> None:
    m = ProximaKVCacheManager(num_slots=num_slots, max_model_len=300, prefix_sharing=True)
    system = list(range(100, 140))
    a, b, c = request(system + [1, 2, 3]), request(system + [7, 7]), request(list(range(9, 29)))
    for r in (a, b, c):
        admit(m, r)
    res = m.residency_index.residency([a.request_id, b.request_id, c.request_id])
    assert res.held.tolist() == [43, 42, 20] and res.alone.tolist() == [3, 2, 20]
    assert res.shared == 40


def test_residency_without_sharing_is_all_held_slots() -> None:
    m = make_manager(prefix_sharing=False)
    a = request(list(range(10, 30)))
    admit(m, a)
    res = m.residency_index.residency([a.request_id, "missing"])
    assert res.alone.tolist() == [20, 0] and res.held.tolist() == [20, 0] and res.shared == 0


@pytest.mark.parametrize("num_slots,expect", [(301, "admit"), (231, "skip")])
def test_admission_counts_a_shared_system_prompt_once(num_slots: int, expect: str) -> None:
    """a (100-token system prompt + 20) runs; b shares the system prompt. The
    projected peak is S (the 100 shared slots) + the peak of the two 20-token own
    parts growing 50 steps: 100 + 2 * (20 + 50) = 240, not 2 * 170 = 340."""
    from vllm_proxima.kv.residency import TokenResidency
    from vllm_proxima.scheduling.admission import ProjectedPeakPolicy

    m = make_manager(num_slots=num_slots)
    policy = ProjectedPeakPolicy(TokenResidency.of(m))  # conservative: max_tokens as final
    system = list(range(200, 300))
    a = request(system + list(range(1, 21)), max_tokens=50)
    admit(m, a)
    b = request(system + list(range(21, 41)), max_tokens=50)
    blocks, hit, _ = m.get_computed_blocks(b)
    assert hit == 100
    policy.begin_step()
    decision = policy.decide(b, b.num_tokens - hit, hit, blocks, [a])
    assert decision == expect
    if expect == "admit":
        assert policy.last_projected_peak == 240


def test_eviction_frees_a_batch_ahead_of_the_shortfall() -> None:
    """One eviction per decode step was the hot spot on a full pool: a shortfall
    evicts ``_evict_ahead`` more cached slots (when there are that many) so the
    next steps allocate from the free list."""
    m = ProximaKVCacheManager(num_slots=8193, max_model_len=9000, prefix_sharing=True)
    assert m._evict_ahead == 64  # 8,192 usable: min(max(64, 8192 // 512), 8192 // 64)
    filler = request(list(range(1, 201)) * 40, max_tokens=8)  # 8,000 tokens, cached at free
    admit(m, filler)
    m.free(filler)
    free_before = m.pool.num_free  # 192 free, 8,000 cached and evictable
    newcomer = request(list(range(300, 560)))  # 260 new tokens: 68 short
    admit(m, newcomer)
    assert m.cache.stats().evicted == 68 + 64
    assert m.pool.num_free == free_before + 68 + 64 - 260
    running = request(list(range(600, 660)))  # fits in the slots freed ahead: no eviction
    admit(m, running)
    assert m.cache.stats().evicted == 68 + 64


def test_residency_index_answers_from_events_alone() -> None:
    """The index knows only what the manager told it: allocated, cached, freed."""
    from vllm_proxima.kv.token_residency import TokenResidencyIndex

    refs = np.zeros(16, dtype=np.int32)  # requests holding each slot (the cache's ref less)
    index = TokenResidencyIndex(16, sharing=True)
    index.cache_attached(lambda slots: refs if slots is None else refs[slots])
    prompt = np.arange(1, 6, dtype=np.int32)
    index.allocated("a", 7)  # a: 5 prompt slots (cached) + 2 of its own
    index.cached("a", prompt)
    refs[1:8] = 1
    assert index.residency(["a"]).alone.tolist() == [7]
    pinned, sole = index.hit_holders(prompt)  # b's hit would be a's prompt, a's alone
    assert pinned == 5 and sole.tolist() == [index.handle_of("a")] * 5
    index.allocated("b", 5)  # b took a's prompt as its hit
    index.cached("b", prompt)
    refs[1:6] = 2
    res = index.residency(["a", "b"])
    assert res.held.tolist() == [7, 5] and res.alone.tolist() == [2, 0] and res.shared == 5
    pinned, sole = index.hit_holders(prompt)
    assert pinned == 5 and not sole.size  # shared now: nobody holds it alone
    index.freed("a")
    refs[1:8] -= 1
    res = index.residency(["a", "b"])
    assert res.handles.tolist() == [-1, index.handle_of("b")] and res.alone.tolist() == [0, 5]


def test_a_hit_is_placed_whatever_the_call_order() -> None:
    """Hit.against resolves a hit from the residents it is given, not from an earlier call."""
    from vllm_proxima.kv.residency import Hit, Residents

    hit = Hit(pinned=10, sole=[("a", 4), ("gone", 3)])
    residents = Residents(np.array([20, 30]), 6, {"b": 0, "a": 1})
    assert hit.against(residents) == (7, [(1, 4)])  # "gone" unknown: charged again
    assert Hit(5, []).against(residents) == (5, [])


@pytest.mark.parametrize("scheduler_records", [False, True], ids=["vllm-0.26", "vllm-0.27"])
def test_vllm_prefix_cache_stats_count_one_lookup_per_admission(
    monkeypatch: pytest.MonkeyPatch, scheduler_records: bool
) -> None:
    """vllm:prefix_cache_{queries,hits}: on vLLM 0.26 the lookup records (and proxima's
    scheduler takes a deferred request's lookup back); from 0.27 upstream's scheduler calls
    ``record_prefix_cache_stats`` once, at admission, so the lookup must not record."""
    from vllm_proxima.kv import manager as manager_mod

    monkeypatch.setattr(manager_mod, "SCHEDULER_RECORDS_HITS", scheduler_records)
    m = make_manager(log_stats=True)
    system = list(range(100, 137))
    admit(m, request(system + [1, 2, 3]))
    b = request(system + [9, 9])
    m.make_prefix_cache_stats()  # hands a's figures over and starts afresh, as each step does
    _, hit, _ = m.get_computed_blocks(b)
    assert hit == 37
    st = m.prefix_cache_stats
    if scheduler_records:
        assert (st.requests, st.queries, st.hits) == (0, 0, 0)
        m.record_prefix_cache_stats(b, hit)  # what 0.27's scheduler does at admission
    assert (st.requests, st.queries, st.hits) == (1, b.num_tokens, 37)
