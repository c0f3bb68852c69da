"""proxima:* metrics: counters count each engine increase once, whichever front-end
(API server) receives the stats; gauges are one series per engine."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
pytest.importorskip("vllm")

from vllm_proxima.metrics import COUNTERS, ProximaStatLogger, to_deltas  # noqa: E402


def test_to_deltas_reports_increases_and_restarts_after_a_reset() -> None:
    emitted: dict[str, float] = {}
    assert to_deltas({"preemptions": 3, "slots_used": 7}, emitted) == {
        "preemptions": 3.0,
        "slots_used": 7,
    }
    assert to_deltas({"preemptions": 5, "slots_used": 2}, emitted)["preemptions"] == 2.0
    assert to_deltas({"preemptions": 5}, emitted)["preemptions"] == 0.0
    # The prefix cache was reset: its totals went down, so they restart from zero.
    assert to_deltas({"preemptions": 1}, emitted)["preemptions"] == 1.0
    assert {"preemptions", "prefix_queries_tokens", "prefix_hits_tokens"} <= COUNTERS


def value(name: str, engine: str) -> float:
    got = prometheus_client.REGISTRY.get_sample_value(
        name, {"model_name": "m-metrics-test", "engine": engine}
    )
    return got or 0.0


def test_two_front_ends_count_each_increase_once() -> None:
    config = SimpleNamespace(model_config=SimpleNamespace(served_model_name="m-metrics-test"))
    front_ends = [ProximaStatLogger(config, 0), ProximaStatLogger(config, 0)]
    emitted: dict[str, float] = {}
    totals = [10, 25, 25, 40, 70, 71]  # the engine's cumulative queried tokens, per step
    for step, total in enumerate(totals):
        stats = to_deltas({"prefix_queries_tokens": total, "slots_used": step}, emitted)
        # The engine sends each step's stats to one front-end only, alternating here.
        front_ends[step % 2].record(
            SimpleNamespace(plugin_stats={"proxima": stats}), None, engine_idx=3
        )
    assert value("proxima:prefix_query_tokens_total", "3") == totals[-1]
    assert value("proxima:kv_slots_used", "3") == len(totals) - 1


@pytest.mark.parametrize(
    ("proxima", "mode", "reason"),
    [
        ({"mode": "on", "mode_reason": "supported"}, "on", "supported"),
        ({"mode": "off", "mode_reason": "context parallelism"}, "off", "context parallelism"),
        ({"mode": "off", "mode_reason": "requested"}, "off", "requested"),
        (None, "off", "no engine-args hook"),  # the config was never settled: stock runs
    ],
)
def test_mode_info_names_the_mode_and_why(
    monkeypatch: pytest.MonkeyPatch, proxima: dict | None, mode: str, reason: str
) -> None:
    monkeypatch.delenv("PROXIMA_MODE", raising=False)
    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=f"m-mode-{mode}-{reason}"),
        additional_config={"proxima": proxima} if proxima else {},
    )
    ProximaStatLogger(config, 0)
    labels = {"model_name": f"m-mode-{mode}-{reason}", "engine": "0"}
    assert (
        prometheus_client.REGISTRY.get_sample_value(
            "proxima:mode_info", {**labels, "mode": mode, "reason": reason}
        )
        == 1.0
    )
