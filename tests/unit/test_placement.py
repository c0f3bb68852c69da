"""``Placement.peak`` is ``projected_peak`` of the residents plus one candidate, exactly:
random residents and candidates, pages of 1 and 16 tokens, several full groups, fixed
window pages, the windowed early part's cut, and ties in remaining steps."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_proxima.scheduling.placement import Placement
from vllm_proxima.scheduling.projection import projected_peak


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("groups", [1, 3])
def test_placing_a_candidate_equals_the_projection_of_all(page: int, groups: int) -> None:
    rng = np.random.default_rng(page * 10 + groups)
    for trial in range(300):
        n = int(rng.integers(0, 40))
        held = rng.integers(1, 600, n)
        # few distinct values: ties between residents and with the candidate
        remaining = rng.integers(0, 12 if trial % 2 else 300, n)
        low = rng.integers(0, 6, n)
        high = low + rng.integers(0, 4, n)
        prep = Placement.of(held, remaining, page, groups, {"low": low, "high": high})
        c, r = int(rng.integers(1, 600)), int(rng.integers(0, 300))
        wl, wh = int(rng.integers(0, 6)), int(rng.integers(6, 9))
        all_held, all_rem = np.append(held, c), np.append(remaining, r)
        assert prep.peak(c, r) == projected_peak(all_held, all_rem, page, groups)
        assert prep.peak(c, r, wl, "low") == projected_peak(
            all_held, all_rem, page, groups, np.append(low, wl)
        )
        cut = int(rng.integers(0, 50))
        assert prep.peak(c, r, wh, "high", cut=cut) == projected_peak(
            all_held, np.minimum(all_rem, cut), page, groups, np.append(high, wh)
        )


def test_the_fallback_for_huge_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_proxima.scheduling.placement as placement

    monkeypatch.setattr(placement, "MAX_RESIDUE_TABLE", 10)
    held, remaining = np.array([17, 40, 3]), np.array([5, 0, 9])
    prep = placement.Placement.of(held, remaining, 16, 2)
    assert prep.at_least is None
    assert prep.peak(33, 4) == projected_peak(np.append(held, 33), np.append(remaining, 4), 16, 2)
