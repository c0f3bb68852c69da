"""The soak's verdicts and plot, from synthetic runs (the tool itself ran on a real server:
docs/benchmarks/cpu-soak-2026-12-04/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxima_bench.serving.soak import plot, verdicts


def run(statuses: list[str], rss: list[float], held_end: float | None) -> dict:
    requests = [
        {"sent": i * 0.5, "latency": 1.0 + i % 3, "status": s} for i, s in enumerate(statuses)
    ]
    samples = [
        {"t": float(i), "rss_mib": r, "gpu_mib": None, "vllm:num_requests_waiting": i % 4}
        for i, r in enumerate(rss)
    ]
    samples[-1]["proxima:kv_slots_used"] = held_end
    return {"requests": requests, "samples": samples}


def test_a_clean_run_passes() -> None:
    v = verdicts(run(["200"] * 30, [1000.0] * 9, 0.0), "on", 0.05)
    assert v["all_answered_200"] and v["no_slot_leaked"]
    assert v["memory"]["rss_mib"]["flat"] and v["memory"]["gpu_mib"] is None
    assert v["statuses"] == {"200": 30} and v["max_waiting"] == 3


def test_errors_leaks_and_growth_fail() -> None:
    v = verdicts(
        run(["200", "500", "timeout"], [1000.0] * 3 + [1000.0] * 3 + [1200.0] * 3, 5.0), "on", 0.05
    )
    assert not v["all_answered_200"]
    assert not v["no_slot_leaked"]  # held slots once idle
    assert not v["memory"]["rss_mib"]["flat"]
    # stock exports no held-slot gauge: no leak verdict to fail
    assert verdicts(run(["200"], [1.0] * 3, None), "off", 0.05)["no_slot_leaked"]


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "soak.png"
    plot(
        {"off": run(["200"] * 40, [10.0] * 5, None), "on": run(["200"] * 40, [11.0] * 5, 0.0)},
        out,
        "t",
    )
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_answers_cut_what_is_still_open_at_max_wall() -> None:
    import asyncio

    from proxima_bench.serving.soak import answers

    async def go() -> list[dict]:
        async def quick() -> dict:
            return {"sent": 0.0, "latency": 0.01, "status": "200"}

        async def stuck() -> dict:
            await asyncio.sleep(60)
            return {"sent": 1.0, "latency": 60.0, "status": "200"}

        tasks = [asyncio.create_task(quick()), asyncio.create_task(stuck())]
        return await answers(tasks, [0.0, 1.0], 0.2)

    records = asyncio.run(go())
    assert records[0]["status"] == "200"
    assert records[1] == {"sent": 1.0, "latency": None, "status": "cut"}
    v = verdicts({"requests": records, "samples": [{"t": 0.0, "rss_mib": 1.0}]}, "off", 0.05)
    assert v["cut_by_max_wall"] == 1 and not v["all_answered_200"]


def test_soak_servers_started_at_once_get_apart_internal_port_bases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxima_bench.serving import soak

    monkeypatch.delenv("VLLM_PORT", raising=False)
    first = soak.make_server("m", "off", [], tmp_path / "off.log", 0)
    second = soak.make_server("m", "on", [], tmp_path / "on.log", 1)
    assert int(second.env["VLLM_PORT"]) - int(first.env["VLLM_PORT"]) >= 100
    assert "--proxima" in first.command and "--proxima" not in second.command
