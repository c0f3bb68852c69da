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


def _same(a: Placement, b: Placement) -> None:
    assert np.array_equal(a.r, b.r) and np.array_equal(a.q_suffix, b.q_suffix)
    assert (a.at_least is None) == (b.at_least is None)
    if a.at_least is not None and b.at_least is not None:
        assert np.array_equal(a.at_least, b.at_least)
    assert a.w_suffix.keys() == b.w_suffix.keys()
    for k in a.w_suffix:
        assert np.array_equal(a.w_suffix[k], b.w_suffix[k])
        assert np.array_equal(a.fixed[k], b.fixed[k])
    assert np.array_equal(a.held, b.held) and np.array_equal(a.remaining, b.remaining)


@pytest.mark.parametrize("page", [1, 16])
def test_inserting_admissions_equals_sorting_them_all_again(page: int) -> None:
    """Admissions join the residents' placement one by one (ties included): the tables
    are those of sorting everyone again, and the next candidate's peak the brute force."""
    rng = np.random.default_rng(page + 7)
    for trial in range(60):
        n = int(rng.integers(0, 20))
        held = rng.integers(1, 600, n)
        remaining = rng.integers(0, 10 if trial % 2 else 200, n)
        low = rng.integers(0, 6, n)
        prep = Placement.of(held, remaining, page, 2, {"low": low})
        for _ in range(int(rng.integers(1, 6))):
            c, r, w = int(rng.integers(1, 600)), int(rng.integers(0, 200)), int(rng.integers(0, 6))
            if trial % 2:
                r = int(rng.integers(0, 10))
            prep = prep.insert(c, r, {"low": w})
            held, remaining, low = np.append(held, c), np.append(remaining, r), np.append(low, w)
            _same(prep, Placement.of(held, remaining, page, 2, {"low": low}))
        c, r = int(rng.integers(1, 600)), int(rng.integers(0, 200))
        all_held, all_rem = np.append(held, c), np.append(remaining, r)
        assert prep.peak(c, r, 1, "low") == brute(all_held, all_rem, page, 2, np.append(low, 1))


def test_insert_past_the_table_falls_back_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_proxima.scheduling.projection as projection

    monkeypatch.setattr(projection, "MAX_RESIDUE_TABLE", 3 * 17)  # 2 requests fit, 3 do not
    held, remaining = np.array([17, 40]), np.array([5, 0])
    prep = projection.Placement.of(held, remaining, 16)
    assert prep.at_least is not None
    bigger = prep.insert(33, 4)
    assert bigger.at_least is None  # 4 rows of 17 residues: the bound from here on
    all_held, all_rem = np.array([17, 40, 33, 9]), np.array([5, 0, 4, 2])
    assert bigger.peak(9, 2) == projected_peak(all_held, all_rem, 16)


def test_insert_names_the_same_fixed_arrays() -> None:
    prep = Placement.of(np.array([3]), np.array([1]), 1, 1, {"low": np.array([2])})
    with pytest.raises(ValueError, match="fixed pages"):
        prep.insert(4, 2)


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("huge", [False, True])
def test_a_placement_read_steps_ago_with_departures(
    page: int, huge: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read at step 0, then ``d`` steps on with requests removed and admitted (in the
    placement's steps): the peak from ``start=d`` is the brute force over the requests
    as they are now, those past their projected steps counted now only."""
    import vllm_proxima.scheduling.projection as projection

    if huge:
        monkeypatch.setattr(projection, "MAX_RESIDUE_TABLE", 10)  # the bound's path
    rng = np.random.default_rng(page + 100 * huge)
    for trial in range(80):
        n = int(rng.integers(1, 25))
        held = rng.integers(1, 600, n)
        remaining = rng.integers(0, 8 if trial % 2 else 120, n)  # ties when few values
        low = rng.integers(0, 5, n)
        prep = Placement.of(held, remaining, page, 2, {"low": low})
        members = [(int(c), int(r), int(w)) for c, r, w in zip(held, remaining, low, strict=True)]
        d = 0
        for _ in range(int(rng.integers(1, 8))):
            d += int(rng.integers(0, 4))
            if members and rng.random() < 0.5:  # a departure
                c, r, w = members.pop(int(rng.integers(0, len(members))))
                prep = prep.remove(c, r, {"low": w})
            else:  # an admission now: c tokens and r steps now, given in the placement's
                c, r, w = int(rng.integers(1, 600)), int(rng.integers(0, 120)), 1
                prep = prep.insert(c - d, r + d, {"low": w})
                members.append((c - d, r + d, w))
            c, r, w = int(rng.integers(1, 600)), int(rng.integers(0, 120)), 2
            cut = int(rng.integers(d, d + 60)) if rng.random() < 0.5 else -1
            got = prep.peak(c - d, r + d, w, "low", cut=cut, start=d)
            now_held = np.array([m[0] + d for m in members] + [c], dtype=np.int64)
            now_rem = np.maximum(np.array([m[1] - d for m in members] + [r]), 0)
            if cut >= 0:
                now_rem = np.minimum(now_rem, cut - d)
            fixed = np.array([m[2] for m in members] + [w], dtype=np.int64)
            want = brute(now_held, now_rem, page, 2, fixed)
            if huge:
                assert got >= want  # the bound: safe
                assert got == projected_peak(now_held, now_rem, page, 2, fixed)
            else:
                assert got == want


def test_remove_names_a_placed_request() -> None:
    prep = Placement.of(np.array([3, 5]), np.array([1, 4]))
    with pytest.raises(ValueError, match="no request"):
        prep.remove(3, 4)
    assert prep.remove(5, 4).peak(1, 0) == projected_peak(np.array([3, 1]), np.array([1, 0]))
