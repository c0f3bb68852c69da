"""Admission leaves a long request room once it was passed over ``RESERVE_AFTER`` times
(``ProjectedPeakPolicy._defer``), on vLLM's real scheduler with the simulator's fake model.

Without it, short requests behind a long one take every page a departure frees, and the
long one waits until ``MAX_DEFERRALS`` stops admission behind it: on one H100 the mixed
stream's long class had P95 TTFT 1.64 s against stock's 1.07 s
(docs/benchmarks/h100-matrix-control-2026-12-06). The stream here is that point's shape in
steps: 10 % long prompts arriving among the brief's mix near the pool's saturation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")

import vllm_proxima.scheduling.admission as admission  # noqa: E402
from proxima_bench.sim.simulate import (  # noqa: E402
    StepTimes,
    Workload,
    make_scheduler,
    make_workload,
    simulate,
)

MODEL = Path(__file__).resolve().parents[3] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/tiny_model.py)"
)
SLOTS = 16384
RESERVE_AFTER = admission.RESERVE_AFTER  # the default, before a test patches it


def _run(workload: Workload, reserve_after: int | None, monkeypatch: Any) -> tuple[Any, StepTimes]:
    monkeypatch.setattr(
        admission, "RESERVE_AFTER", 10**9 if reserve_after is None else reserve_after
    )
    proxima = None if reserve_after == -1 else {"admission": "adaptive"}
    scheduler = make_scheduler(str(MODEL), proxima, SLOTS, max_num_seqs=256, prefix_caching=True)
    times = StepTimes(scheduler)
    return simulate(scheduler, workload, "mixed", on_step=times), times


def test_a_passed_over_long_request_gets_room(monkeypatch: Any) -> None:
    workload = Workload.mixed(300, rate=0.45, seed=0)
    assert workload.classes.count("long") == 29
    before, t_before = _run(workload, None, monkeypatch)
    after, t_after = _run(workload, RESERVE_AFTER, monkeypatch)
    stock, t_stock = _run(workload, -1, monkeypatch)  # stock's scheduler (proxima off)
    assert before.finished == after.finished == stock.finished == 300
    assert before.preemptions == after.preemptions == 0 < stock.preemptions

    def p95_first(times: StepTimes, cls: str) -> float:
        return float(np.percentile(times.waits(workload, cls)[0], 95))

    long_before, long_after = p95_first(t_before, "long"), p95_first(t_after, "long")
    # The long class waits markedly less (191 -> 142 steps at P95 here; stock: 108) ...
    assert long_after <= 0.8 * long_before
    assert long_after >= p95_first(t_stock, "long")  # stock admits at once and preempts
    # ... for a few more steps in all, still fewer than stock's.
    assert before.steps <= after.steps <= 1.05 * before.steps
    assert after.steps <= stock.steps
    # The short class pays some of it back, no more than stock's wait.
    assert p95_first(t_after, "short") <= p95_first(t_stock, "short")


def test_tight_shared_prompt_pools_pay_little(monkeypatch: Any) -> None:
    """Where shared-prompt requests queue on a tight pool the reservation holds back pages
    from the requests behind: ~3 % more steps, far under stock's (which preempts)."""
    workload = make_workload("sysprompt", 300)
    runs = {}
    for name, reserve_after in (("before", None), ("after", RESERVE_AFTER), ("stock", -1)):
        monkeypatch.setattr(
            admission, "RESERVE_AFTER", 10**9 if reserve_after is None else reserve_after
        )
        proxima = None if reserve_after == -1 else {"admission": "adaptive"}
        scheduler = make_scheduler(str(MODEL), proxima, 6000, max_num_seqs=256, prefix_caching=True)
        runs[name] = simulate(scheduler, workload, name)
    before, after, stock = runs["before"], runs["after"], runs["stock"]
    assert before.finished == after.finished == stock.finished == 300
    assert after.preemptions == 0 < stock.preemptions
    assert before.steps <= after.steps <= 1.05 * before.steps  # 3,135 -> 3,226 here
    assert after.steps < stock.steps  # 3,351


def test_no_reservation_where_nothing_waits_long(monkeypatch: Any) -> None:
    """A burst of alike requests and a stream under saturation: the same schedule."""
    for workload in (Workload.uniform(400, seed=3), Workload.mixed(200, rate=0.2, seed=1)):
        before, _ = _run(workload, None, monkeypatch)
        after, _ = _run(workload, RESERVE_AFTER, monkeypatch)
        assert (after.steps, after.preemptions) == (before.steps, before.preemptions)
