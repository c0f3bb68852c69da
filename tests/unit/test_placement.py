"""``Placement`` (the residents sorted once, one candidate placed by bisection) against
a brute-force peak, and ``Windows.placed_peak`` against ``windowed_peak``: random
residents and candidates, pages of 1 and 16 tokens, several full groups, fixed window
pages, the windowed early part's cut, and ties in remaining steps."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_proxima.kv.residency import KVShape
from vllm_proxima.scheduling.projection import Placement, projected_peak, windowed_peak
from vllm_proxima.scheduling.windows import Windows


def brute(
    held: np.ndarray, remaining: np.ndarray, page: int, groups: int, fixed: np.ndarray
) -> int:
    """``max over k`` of the pages alive at step ``k``, summed request by request."""
    return max(
        sum(
            groups * -(-(int(c) + k) // page) + int(w)
            for c, r, w in zip(held, remaining, fixed, strict=True)
            if k <= r
        )
        for k in range(int(remaining.max()) + 1)
    )


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("groups", [1, 3])
def test_placing_a_candidate_equals_the_brute_force_peak(page: int, groups: int) -> None:
    rng = np.random.default_rng(page * 10 + groups)
    for trial in range(150):
        n = int(rng.integers(0, 30))
        held = rng.integers(1, 600, n)
        # few distinct values: ties between residents and with the candidate
        remaining = rng.integers(0, 12 if trial % 2 else 200, n)
        low = rng.integers(0, 6, n)
        prep = Placement.of(held, remaining, page, groups, {"low": low})
        c, r, w = int(rng.integers(1, 600)), int(rng.integers(0, 200)), int(rng.integers(0, 6))
        all_held, all_rem = np.append(held, c), np.append(remaining, r)
        none = np.zeros(n + 1, dtype=np.int64)
        assert prep.peak(c, r) == brute(all_held, all_rem, page, groups, none)
        assert prep.peak(c, r) == projected_peak(all_held, all_rem, page, groups)
        assert prep.peak(c, r, w, "low") == brute(
            all_held, all_rem, page, groups, np.append(low, w)
        )
        cut = int(rng.integers(0, 50))
        assert prep.peak(c, r, w, "low", cut=cut) == brute(
            all_held, np.minimum(all_rem, cut), page, groups, np.append(low, w)
        )


@pytest.mark.parametrize("page", [1, 16])
def test_windows_placed_peak_equals_windowed_peak(page: int) -> None:
    rng = np.random.default_rng(page)
    shape = KVShape(page, full=2, windows=(64,))
    for _ in range(200):
        n = int(rng.integers(0, 30))
        held, remaining = rng.integers(1, 600, n), rng.integers(0, 200, n)
        win = Windows(shape, 2048, 4096, 0)
        win.low = rng.integers(0, 6, n)
        win.high = win.low + rng.integers(0, 3, n) * (rng.random(n) < 0.3)
        win.until = rng.integers(1, 6, n)
        late = win.high > win.low
        win.last_transient = int(win.until[late].max()) if late.any() else 0
        lo = int(rng.integers(0, 6))
        cand = (lo, lo + int(rng.integers(0, 3)), int(rng.integers(1, 6)))
        win._next = cand
        c, r = int(rng.integers(1, 600)), int(rng.integers(0, 200))
        got = win.placed_peak(win.prepare(held, remaining), c, r)
        low, high, until = (
            np.append(a, x) for a, x in zip((win.low, win.high, win.until), cand, strict=True)
        )
        want = windowed_peak(np.append(held, c), np.append(remaining, r), shape, low, high, until)
        assert got == want


def test_the_bound_for_huge_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_proxima.scheduling.projection as projection

    monkeypatch.setattr(projection, "MAX_RESIDUE_TABLE", 10)
    held, remaining = np.array([17, 40, 3]), np.array([5, 0, 9])
    prep = projection.Placement.of(held, remaining, 16, 2)
    assert prep.at_least is None
    all_held, all_rem = np.append(held, 33), np.append(remaining, 4)
    bound = prep.peak(33, 4)
    assert bound == projected_peak(all_held, all_rem, 16, 2)  # the same bound both ways
    assert bound >= brute(all_held, all_rem, 16, 2, np.zeros(4, dtype=np.int64))  # and safe
