"""Projected-peak arithmetic and the output-length model (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_proxima.scheduling.lengths import OutputLengthModel
from vllm_proxima.scheduling.projection import projected_peak


def brute_force_peak(held: list[int], remaining: list[int], page: int = 1) -> int:
    def pages(tokens: int) -> int:
        return -(-tokens // page)

    horizon = max(remaining, default=0)
    best = sum(pages(c) for c in held)
    for k in range(horizon + 1):
        best = max(best, sum(pages(c + k) for c, r in zip(held, remaining, strict=True) if k <= r))
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), min_size=0, max_size=25))
def test_projected_peak_matches_brute_force(reqs: list[tuple[int, int]]) -> None:
    held = [c for c, _ in reqs]
    remaining = [r for _, r in reqs]
    got = projected_peak(np.array(held, dtype=np.int64), np.array(remaining, dtype=np.int64))
    assert got == brute_force_peak(held, remaining)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), min_size=0, max_size=25),
    st.sampled_from([2, 3, 16, 128]),
)
def test_projected_peak_in_pages_matches_brute_force(
    reqs: list[tuple[int, int]], page: int
) -> None:
    """Exact in pages: each request holds ceil(tokens / page) pages."""
    held = [c for c, _ in reqs]
    remaining = [r for _, r in reqs]
    got = projected_peak(np.array(held, dtype=np.int64), np.array(remaining, dtype=np.int64), page)
    assert got == brute_force_peak(held, remaining, page)


def test_projected_peak_bounds_huge_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the residue table's size it bounds each partial page by a whole one."""
    from vllm_proxima.scheduling import projection

    held, remaining = np.array([10, 30, 5]), np.array([7, 2, 40])
    exact = projected_peak(held, remaining, 16)
    monkeypatch.setattr(projection, "MAX_RESIDUE_TABLE", 1)
    bound = projected_peak(held, remaining, 16)
    assert exact <= bound <= exact + len(held)


def test_projected_peak_known_case() -> None:
    # Two requests: 10 tokens with 5 to go, 100 tokens with 1 to go.
    # k=1: 11 + 101 = 112; k=5: 15 only. Peak 112.
    assert projected_peak(np.array([10, 100]), np.array([5, 1])) == 112


def test_length_model_falls_back_to_max_tokens_until_ready() -> None:
    model = OutputLengthModel(min_samples=4)
    gen = np.array([0, 10])
    maxt = np.array([100, 100])
    assert model.final_lengths(gen, maxt).tolist() == [100, 100]
    for _ in range(3):
        model.observe(25, 100)
    assert not model.ready
    model.observe(25, 100)
    assert model.ready
    # Every finished request used a quarter of max_tokens.
    assert model.final_lengths(gen, maxt).tolist() == [25, 25]


def test_length_model_conditions_on_progress() -> None:
    model = OutputLengthModel(min_samples=10, quantile=1.0)
    for used in range(10, 101, 10):  # ratios 0.1 .. 1.0
        model.observe(used, 100)
    # A request already at 55 tokens: only ratios above 0.55 remain plausible.
    final = model.final_lengths(np.array([55]), np.array([100]))
    assert final.tolist() == [100]
    model_q = OutputLengthModel(min_samples=10, quantile=0.0)
    for used in range(10, 101, 10):
        model_q.observe(used, 100)
    assert model_q.final_lengths(np.array([55]), np.array([100])).tolist() == [60]
    # Never below what was generated + 1, never above max_tokens.
    assert model_q.final_lengths(np.array([99]), np.array([100])).tolist() == [100]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), max_size=60),
    st.integers(1, 12),
)
def test_length_model_keeps_the_window_sorted(obs: list[tuple[int, int]], window: int) -> None:
    """The sorted ratios it keeps incrementally are the window's, re-sorted."""
    model = OutputLengthModel(window=window, min_samples=1)
    for used, max_tokens in obs:
        model.observe(used, max_tokens)
        assert model._sorted.tolist() == sorted(model.ratios)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(1, 300)), min_size=8, max_size=40),
    st.lists(st.tuples(st.integers(0, 400), st.integers(1, 300)), max_size=20),
)
def test_final_length_scalar_matches_vectorised(
    obs: list[tuple[int, int]], reqs: list[tuple[int, int]]
) -> None:
    model = OutputLengthModel(min_samples=8)
    for used, max_tokens in obs:
        model.observe(used, max_tokens)
    generated = np.array([min(g, m) for g, m in reqs], dtype=np.int64)
    max_tokens = np.array([m for _, m in reqs], dtype=np.int64)
    vec = model.final_lengths(generated, max_tokens).tolist()
    assert [
        model.final_length(int(g), int(m)) for g, m in zip(generated, max_tokens, strict=True)
    ] == vec


class _Req:
    """The fields the admission policy reads of a vLLM request."""

    def __init__(self, i: int, prompt: int, computed: int, generated: int, max_tokens: int):
        self.request_id = str(i)
        self.num_tokens = prompt + generated
        self.num_computed_tokens = min(computed, self.num_tokens)
        self.num_output_tokens = generated
        self.max_tokens = max_tokens


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3000), st.integers(0, 3000), st.integers(0, 300)),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_candidate_projection_scalar_matches_the_residents(
    reqs: list[tuple[int, int, int]], learn: bool
) -> None:
    """A candidate projected alone, behind the residents' queued prompt tokens, gets
    the steps it would get as the last of them in one vectorised projection."""
    from vllm_proxima.scheduling.admission import ProjectedPeakPolicy

    class _View:
        max_model_len = 4096
        lookahead_tokens = 0

    policy = ProjectedPeakPolicy(_View(), learn=learn, chunk_tokens=512)  # type: ignore[arg-type]
    for used in range(10, 200, 10):
        policy.lengths.observe(used, 200)
    rs = [_Req(i, p, c, min(g, 256), 256) for i, (p, c, g) in enumerate(reqs)]
    fields = np.array(
        [(r.num_tokens, r.num_computed_tokens, r.num_output_tokens, r.max_tokens) for r in rs],
        dtype=np.int64,
    )
    everyone = policy._project(*fields.T)
    policy._project(*fields[:-1].T)  # the residents alone: sets _queued
    cand = rs[-1]
    assert policy._project_one(cand, cand.num_computed_tokens, policy._queued) == everyone[-1]
