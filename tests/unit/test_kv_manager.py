"""ProximaKVCacheManager against the scheduler-facing contract of upstream's
KVCacheManager (tests/v1/core/test_kv_cache_utils.py style), at 1-token pages."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vllm")

from tests.unit.utils import make_request  # noqa: E402
from vllm_proxima.kv.manager import ProximaKVCacheManager  # noqa: E402


def make_manager(num_slots: int = 101, max_model_len: int = 64, **kw) -> ProximaKVCacheManager:
    return ProximaKVCacheManager(num_slots=num_slots, max_model_len=max_model_len, debug=True, **kw)


def test_allocates_one_slot_per_token_and_no_rounding() -> None:
    m = make_manager()
    req = make_request(10)
    blocks = m.allocate_slots(req, 10)
    assert blocks is not None
    (ids,) = blocks.get_block_ids()
    assert len(ids) == 10 and len(set(ids)) == 10
    assert 0 not in ids  # slot 0 is the null slot the runner pads with
    assert m.num_slots_of(req.request_id) == 10
    assert m.pool.num_used == 10
    assert m.usage == pytest.approx(10 / 100)


def test_prompt_then_decode_appends_and_stays_contiguous() -> None:
    m = make_manager()
    req = make_request(5)
    first = m.allocate_slots(req, 5)
    req.num_computed_tokens = 5
    nxt = m.allocate_slots(req, 1)
    (a,) = first.get_block_ids()
    (b,) = nxt.get_block_ids()
    assert b == [a[-1] + 1]  # the pool continues the request's run
    (all_ids,) = m.get_block_ids(req.request_id)
    assert all_ids == a + b


def test_shortage_returns_none_and_changes_nothing() -> None:
    m = make_manager(num_slots=11)
    a = make_request(8)
    assert m.allocate_slots(a, 8) is not None
    b = make_request(5)
    before = m.pool.num_free
    assert m.allocate_slots(b, 5) is None
    assert m.pool.num_free == before
    assert m.num_slots_of(b.request_id) == 0


def test_free_returns_every_slot() -> None:
    m = make_manager()
    reqs = [make_request(n) for n in (3, 7, 11)]
    for r in reqs:
        assert m.allocate_slots(r, r.num_tokens) is not None
    for r in reqs:
        m.free(r)
    assert m.pool.num_free == m.pool.num_usable
    assert not m.req_slots
    m.pool.check_invariants()


def test_lookahead_and_max_model_len_cap() -> None:
    m = make_manager(max_model_len=12)
    req = make_request(10)
    blocks = m.allocate_slots(req, 10, num_lookahead_tokens=5)
    assert len(blocks) == 12  # capped at max_model_len


def test_full_sequence_must_fit_gates_admission() -> None:
    m = make_manager(num_slots=21)
    req = make_request(30)
    assert m.allocate_slots(req, 8, full_sequence_must_fit=True) is None
    assert m.allocate_slots(req, 8) is not None


def test_watermark_applies_to_waiting_requests_only() -> None:
    m = make_manager(num_slots=101, max_model_len=200, watermark=0.1)  # 10 kept free
    waiting = make_request(95)
    assert m.allocate_slots(waiting, 95, has_scheduled_reqs=True) is None
    assert m.allocate_slots(waiting, 90, has_scheduled_reqs=True) is not None


def test_computed_blocks_and_stats_without_prefix_cache() -> None:
    m = make_manager(log_stats=True)
    req = make_request(4)
    blocks, n, boundary = m.get_computed_blocks(req)
    assert (len(blocks), n, boundary) == (0, 0, 0)
    assert m.make_prefix_cache_stats() is not None
    assert m.get_num_common_prefix_blocks(req.request_id) == [0]
    assert m.take_events() == [] and m.take_new_block_ids() == []


def test_stranded_by_block16() -> None:
    m = make_manager()
    for n in (1, 16, 17):
        r = make_request(n)
        m.allocate_slots(r, n)
    # 1 -> 15 empty in a 16-block, 16 -> 0, 17 -> 15.
    assert m.stranded_by_block16() == 30


def test_zero_new_tokens_is_an_error() -> None:
    m = make_manager()
    with pytest.raises(ValueError):
        m.allocate_slots(make_request(3), 0)


def test_random_storm_leaves_nothing_behind() -> None:
    rng = np.random.default_rng(0)
    m = make_manager(num_slots=501, max_model_len=400)
    live = []
    for _ in range(500):
        if live and rng.random() < 0.4:
            m.free(live.pop(int(rng.integers(len(live)))))
            continue
        r = make_request(int(rng.integers(1, 40)), max_tokens=8)
        if m.allocate_slots(r, r.num_tokens) is not None:
            live.append(r)
            r.num_computed_tokens = r.num_tokens
            for _ in range(int(rng.integers(0, 5))):
                if m.allocate_slots(r, 1) is None:
                    break
                r.num_computed_tokens += 1
    held = sum(m.num_slots_of(r.request_id) for r in live)
    assert m.pool.num_used == held
    for r in live:
        m.free(r)
    assert m.pool.num_free == m.pool.num_usable
