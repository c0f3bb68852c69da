"""A reading of the residents kept for later steps (``scheduling/reading.py``): its peak
``d`` steps on equals the projected peak of the residents as they are then, through
admissions (``join``) and departures (``leave``); a hit that moves pages needs this
step's rows; a reading placed nowhere cannot take a departure."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_proxima.kv.residency import KVShape, Residents
from vllm_proxima.scheduling.projection import projected_peak, windowed_peak
from vllm_proxima.scheduling.reading import Reading, row_index
from vllm_proxima.scheduling.windows import Windows


def reading(held: list[int], rem: list[int], step: int, page: int, horizon: int = 0) -> Reading:
    own = np.array(held, dtype=np.int64)
    ids = {f"r{i}": i for i in range(len(held))}
    residents = Residents(own, 5, ids)
    return Reading(
        residents, own, np.array(rem, dtype=np.int64), 5, step, page, horizon, None, 8, dict(ids)
    )


def now_peak(members: dict[str, tuple[int, int]], d: int, page: int, horizon: int) -> int:
    """The peak of the members as they are ``d`` steps after the reading (+ S = 5)."""
    held = np.array([c + d for c, _ in members.values()], dtype=np.int64)
    rem = np.maximum(np.array([r - d for _, r in members.values()], dtype=np.int64), 0)
    if horizon:
        rem = np.minimum(rem, horizon)
    return projected_peak(held, rem, page) + 5


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("horizon", [0, 20])
def test_a_kept_reading_projects_the_residents_as_they_are_now(page: int, horizon: int) -> None:
    rng = np.random.default_rng(page + horizon)
    for _ in range(40):
        n = int(rng.integers(1, 15))
        held, rem = rng.integers(1, 400, n).tolist(), rng.integers(0, 60, n).tolist()
        kept = reading(held, rem, 100, page, horizon)
        members = {f"r{i}": (held[i], rem[i]) for i in range(n)}
        assert kept.peak(1, 0, 100) == now_peak({**members, "c": (1, 0)}, 0, page, horizon)
        step, joined = 100, 0
        for _ in range(6):
            step += int(rng.integers(0, 3))
            d = step - 100
            if members and rng.random() < 0.4:
                rid = sorted(members)[int(rng.integers(0, len(members)))]
                assert kept.leave(rid)
                del members[rid]
            c, r = int(rng.integers(1, 400)), int(rng.integers(0, 60))
            want = now_peak({**members, "new": (c - d, r + d)}, d, page, horizon)
            assert kept.peak(c, r, step) == want
            if rng.random() < 0.6:
                kept.join(f"j{joined}", c, r, step)
                members[f"j{joined}"] = (c - d, r + d)
                joined += 1


def test_a_reading_placed_nowhere_cannot_take_a_departure() -> None:
    kept = reading([40, 80], [10, 30], step=7, page=16)
    assert not kept.leave("r1")  # the policy reads again
    kept = reading([40, 80], [10, 30], step=7, page=16)
    kept.peak(10, 5, 7)  # places the rows
    assert kept.leave("r1") and kept.stale
    assert not kept.current(7)  # a hit that moves pages must read again
    assert kept.leave("unknown")  # never in the reading: nothing counted


def test_a_reading_for_one_step_ignores_departures() -> None:
    kept = reading([40], [10], step=3, page=1)
    kept.index = None
    kept.peak(5, 5, 3)
    assert kept.leave("r0") and not kept.stale


def test_moves_change_the_rows_and_the_shared_pages() -> None:
    kept = reading([64, 80], [10, 30], step=7, page=16)
    moved = kept.move(20, 12, [(1, 2)], groups=1)  # 2 pages of r1 are now shared
    assert moved.held.tolist() == [64, 48, 20] and moved.shared == 5 + 2
    want = projected_peak(moved.held, moved.remaining, 16) + moved.shared
    assert kept.peak(20, 12, 7, moved) == want
    kept.join("new", 20, 12, 7, moved)
    assert kept.placement is None and kept.index == {"r0": 0, "r1": 1, "new": 2}


def test_row_index() -> None:
    class R:
        def __init__(self, rid: str) -> None:
            self.request_id = rid

    assert row_index([R("a"), R("b")]) == {"a": 0, "b": 1}  # type: ignore[list-item]


def test_rows_that_disagree_with_the_placement_read_again(caplog: pytest.LogCaptureFixture) -> None:
    kept = reading([40, 80], [10, 30], step=7, page=16)
    kept.peak(10, 5, 7)
    kept.held = kept.held.copy()
    kept.held[1] = 81  # not what the placement holds
    with caplog.at_level("WARNING", logger="vllm.proxima"):
        assert not kept.leave("r1")  # the policy drops the reading instead of crashing
    assert "reads the residents again" in caplog.text


def windowed_now(
    members: dict[str, tuple[int, int, int, int, int]], d: int, shape: KVShape, horizon: int
) -> int:
    """``windowed_peak`` of the members (tokens, steps, low, high, until: in the reading's
    steps) as they are ``d`` steps after the reading (+ S = 5)."""
    rows = np.array(list(members.values()), dtype=np.int64).reshape(-1, 5)
    held, rem = rows[:, 0] + d, np.maximum(rows[:, 1] - d, 0)
    if horizon:
        rem = np.minimum(rem, horizon)
    until = np.maximum(rows[:, 4] - d, 0)
    return windowed_peak(held, rem, shape, rows[:, 2], rows[:, 3], until) + 5


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("horizon", [0, 20])
def test_a_kept_windowed_reading_projects_the_residents_as_they_are_now(
    page: int, horizon: int
) -> None:
    """Sliding-window groups: each member's prompt window pages (``high``) end at its
    ``until``, counted from the reading; admissions and departures in between."""
    rng = np.random.default_rng(7 + page + horizon)
    shape = KVShape(page, full=2, windows=(64,))
    for _ in range(60):
        n = int(rng.integers(1, 15))
        held, rem = rng.integers(1, 400, n), rng.integers(0, 60, n)
        kept = reading(held.tolist(), rem.tolist(), 100, page, horizon)
        win = Windows(shape, 2048, 4096, 0)
        win.low = rng.integers(0, 6, n)
        win.high = win.low + rng.integers(0, 4, n) * (rng.random(n) < 0.4)
        win.until = rng.integers(1, 8, n)
        late = win.high > win.low
        win.last_transient = int(win.until[late].max()) if late.any() else 0
        kept.win = win
        members = {
            f"r{i}": (
                int(held[i]),
                int(rem[i]),
                int(win.low[i]),
                int(win.high[i]),
                int(win.until[i]),
            )
            for i in range(n)
        }
        step, joined = 100, 0
        for _ in range(8):
            d = step - 100
            lo = int(rng.integers(0, 6))
            hi, u = lo + int(rng.integers(0, 3)), int(rng.integers(0, 5))
            win._next = (lo, hi, u)
            c, r = int(rng.integers(1, 400)), int(rng.integers(0, 60))
            want = windowed_now(
                {**members, "new": (c - d, r + d, lo, hi, u + d)}, d, shape, horizon
            )
            assert kept.peak(c, r, step) == want
            if rng.random() < 0.6:
                kept.join(f"j{joined}", c, r, step)
                win.admit(d)
                members[f"j{joined}"] = (c - d, r + d, lo, hi, u + d)
                joined += 1
            step += int(rng.integers(0, 3))
            if members and rng.random() < 0.5:
                rid = sorted(members)[int(rng.integers(0, len(members)))]
                assert kept.leave(rid)
                del members[rid]
