"""The projection of sliding-window and hybrid KV caches, against brute force.

``KVShape.window_pages`` against vLLM's own ``SlidingWindowManager`` driven the way
``allocate_slots`` drives it (free what left the window on the processed tokens, then
extend the list); ``projected_peak`` with groups and constants, and ``windowed_peak``,
against a step-by-step sum of every request's page counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_proxima.kv.residency import KVShape
from vllm_proxima.scheduling.projection import projected_peak, windowed_peak

vllm = pytest.importorskip("vllm")


def _manager(window: int, block: int, num_blocks: int = 4096):  # type: ignore[no-untyped-def]
    import torch
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    spec = SlidingWindowSpec(
        block_size=block, num_kv_heads=1, head_size=1, dtype=torch.float32, sliding_window=window
    )
    pool = BlockPool(num_blocks, enable_caching=False, hash_block_size=block)
    return SlidingWindowManager(
        spec,
        block_pool=pool,
        enable_caching=False,
        kv_cache_group_id=0,
        scheduler_block_size=block,
    )


def _live(manager, rid: str) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for b in manager.req_to_blocks.get(rid, ()) if not b.is_null)


@settings(max_examples=150, deadline=None)
@given(
    window=st.integers(2, 200),
    block=st.sampled_from([1, 4, 16, 32]),
    prompt=st.integers(1, 600),
    chunk=st.integers(1, 256),
    decode=st.integers(0, 300),
    in_flight=st.sampled_from([False, True]),
    lookahead=st.integers(0, 3),
)
def test_window_pages_bound_vllms_sliding_window_manager(
    window: int,
    block: int,
    prompt: int,
    chunk: int,
    decode: int,
    in_flight: bool,
    lookahead: int,
) -> None:
    """A request prefilled in chunks then decoded, one step in flight or none: after
    every allocation its window's real pages are within the bound of the phase, and the
    decode bound is reached (it is the most, not just a bound)."""
    m = _manager(window, block)
    batches = 2 if in_flight else 1
    shape = KVShape(
        block,
        full=0,
        windows=(window,),
        decode_step=batches + lookahead,
        prefill_step=batches * chunk + lookahead,
        batches=batches,
    )
    final = prompt + decode
    computed = 0
    flight = 0  # tokens scheduled last step, not processed yet (async)
    decode_max = 0
    while computed < final:
        new = min(chunk, prompt - computed) if computed < prompt else 1
        processed = computed - flight
        m.remove_skipped_blocks("r", processed)
        m.allocate_new_blocks("r", computed + new + lookahead, computed + new)
        live = _live(m, "r")
        prefill_phase = computed < prompt or (in_flight and computed - flight < prompt)
        if prefill_phase:
            assert live <= shape.window_pages(prompt + shape.decode_step, shape.prefill_step)
        else:
            assert live <= shape.window_pages(final + lookahead, shape.decode_step)
            decode_max = max(decode_max, live)
        flight = new if in_flight else 0
        computed += new
    if decode > window + 3 * block:
        # Long enough for the window to plateau at every offset within a page.
        assert decode_max == shape.window_pages(final + lookahead, shape.decode_step)


def _pages(tokens: int, page: int) -> int:
    return -(-tokens // page)


def brute_peak(
    held: list[int],
    remaining: list[int],
    page: int,
    groups: int,
    low: list[int],
    high: list[int],
    until: list[int],
) -> int:
    horizon = max(remaining, default=0)
    return max(
        sum(
            groups * _pages(c + k, page) + (h if k < t else lo)
            for c, r, lo, h, t in zip(held, remaining, low, high, until, strict=True)
            if k <= r
        )
        for k in range(horizon + 1)
    )


requests = st.lists(
    st.tuples(
        st.integers(0, 300),  # own tokens per full group
        st.integers(0, 120),  # steps to go
        st.integers(0, 12),  # window pages once decoding
        st.integers(0, 30),  # extra window pages while the prompt is in
        st.integers(0, 4),  # steps that lasts
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(reqs=requests, page=st.sampled_from([1, 3, 16]), groups=st.integers(0, 3))
def test_projected_peak_with_groups_and_constants_is_exact(
    reqs: list[tuple[int, int, int, int, int]], page: int, groups: int
) -> None:
    held, remaining, low = ([r[i] for r in reqs] for i in range(3))
    got = projected_peak(
        np.array(held), np.array(remaining), page, groups=groups, fixed=np.array(low)
    )
    assert got == brute_peak(held, remaining, page, groups, low, low, [0] * len(reqs))


@settings(max_examples=200, deadline=None)
@given(reqs=requests, page=st.sampled_from([1, 3, 16]), groups=st.integers(0, 3))
def test_windowed_peak_is_safe_and_exact_without_transients(
    reqs: list[tuple[int, int, int, int, int]], page: int, groups: int
) -> None:
    held, remaining, low = ([r[i] for r in reqs] for i in range(3))
    high = [r[2] + r[3] for r in reqs]
    until = [r[4] for r in reqs]
    shape = KVShape(page, full=groups, windows=(64,))
    args = [np.array(x) for x in (held, remaining)]
    got = windowed_peak(*args, shape, np.array(low), np.array(high), np.array(until))
    truth = brute_peak(held, remaining, page, groups, low, high, until)
    assert got >= truth  # never below what the requests will hold
    # Exact when every transient lasts equally long (one prompt burst: the usual case),
    # and with none at all.
    same = [max(until) if h > lo else 0 for h, lo in zip(high, low, strict=True)]
    assert windowed_peak(*args, shape, np.array(low), np.array(high), np.array(same)) == brute_peak(
        held, remaining, page, groups, low, high, same
    )
    assert windowed_peak(*args, shape, np.array(low), np.array(low), np.array(until)) == brute_peak(
        held, remaining, page, groups, low, low, until
    )


def test_uniform_shape_is_the_plain_projection() -> None:
    rng = np.random.default_rng(0)
    held, rem = rng.integers(0, 500, 50), rng.integers(0, 200, 50)
    assert KVShape(16).uniform
    assert projected_peak(held, rem, 16) == projected_peak(
        held, rem, 16, groups=1, fixed=np.zeros(50, dtype=np.int64)
    )


def test_window_pages_known_case() -> None:
    # W = 64, B = 16, one token a step: a window's 64 tokens span at most 5 pages.
    shape = KVShape(16, full=1, windows=(64, 64))
    assert shape.window_pages(1000, 1) == 2 * 5
    assert shape.window_pages(40, 1) == 2 * 3  # a short request never fills its window
    assert list(shape.window_pages(np.array([16, 1000]), 1)) == [2, 10]
