"""``Curve`` (the residents' demand per row, kept for a step) against
``Placement.peak``: random residents, pages of 1 and 16 tokens, several full groups,
a fixed pages array, horizon cuts, later starts, ties; and through admissions
(``insert``) and departures (``remove``) kept in step with the placement's."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_proxima.scheduling.curve import Curve
from vllm_proxima.scheduling.projection import Placement


def random_case(rng: np.random.Generator, page: int, groups: int) -> tuple[Placement, bool]:
    n = int(rng.integers(0, 30))
    ties = bool(rng.random() < 0.5)
    held = rng.integers(-5, 600, n)  # a kept reading's rows can be below their steps
    remaining = rng.integers(0, 12 if ties else 200, n)
    low = rng.integers(0, 6, n)
    return Placement.of(held, remaining, page, groups, {"low": low}), ties


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("groups", [1, 3])
def test_a_curve_places_candidates_as_the_placement_does(page: int, groups: int) -> None:
    rng = np.random.default_rng(page * 7 + groups)
    for _ in range(300):
        placement, ties = random_case(rng, page, groups)
        cut = int(rng.integers(-1, 60))
        start = int(rng.integers(0, 8))
        fixed = "low" if rng.random() < 0.5 else None
        curve = Curve.of(placement, fixed, cut, start)
        assert curve is not None
        for _ in range(5):
            c = int(rng.integers(1, 600)) - start
            r = int(rng.integers(0, 12 if ties else 200)) + start
            w = int(rng.integers(0, 6)) if fixed else 0
            want = placement.peak(c, r, w, fixed, cut=cut, start=start)
            assert curve.peak(c, r, w) == want


@pytest.mark.parametrize("page", [1, 16])
def test_a_curve_follows_admissions_and_departures(page: int) -> None:
    rng = np.random.default_rng(page + 100)
    for _ in range(120):
        placement, ties = random_case(rng, page, 2)
        cut, start = int(rng.integers(-1, 60)), int(rng.integers(0, 8))
        curve = Curve.of(placement, "low", cut, start)
        assert curve is not None
        rows = list(
            zip(
                placement.held.tolist(),
                placement.remaining.tolist(),
                placement.fixed["low"].tolist(),
                strict=True,
            )
        )
        for _ in range(10):
            if rows and rng.random() < 0.4:
                held, rem, w = rows.pop(int(rng.integers(0, len(rows))))
                placement = placement.remove(held, rem, {"low": w})
                curve = curve.remove(placement, held, rem, w)
            else:
                held, rem = int(rng.integers(1, 600)), int(rng.integers(0, 12 if ties else 200))
                w = int(rng.integers(0, 6))
                placement = placement.insert(held, rem, {"low": w})
                curve = curve.insert(placement, held, rem, w)
                rows.append((held, rem, w))
            c, r, w = int(rng.integers(1, 600)), int(rng.integers(0, 200)), int(rng.integers(0, 6))
            assert curve.peak(c, r, w) == placement.peak(c, r, w, "low", cut=cut, start=start)
            fresh = Curve.of(placement, "low", cut, start)
            assert fresh is not None and fresh.peak(c, r, w) == curve.peak(c, r, w)


def test_no_curve_for_huge_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_proxima.scheduling.projection as projection

    monkeypatch.setattr(projection, "MAX_RESIDUE_TABLE", 10)
    placement = Placement.of(np.array([5, 9]), np.array([3, 4]), 16)
    assert placement.at_least is None and Curve.of(placement) is None
