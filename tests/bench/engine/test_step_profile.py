"""The per-step profile (proxima_bench.engine.step_profile): its window and sums on
synthetic steps, then stock and proxima engines on the tiny model (CPU: no GPU events)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxima_bench.engine.step_profile import (
    Recorder,
    host_probe,
    model_vocab,
    report,
    summarize,
    window,
)
from tests.engine.utils import MODEL


def test_importing_the_profile_leaves_the_environment_alone() -> None:
    # It once set VLLM_ENABLE_V1_MULTIPROCESSING=0 at import; this test module's import then
    # reached every later subprocess of the session and failed an upstream e2e test.
    import importlib

    import proxima_bench.engine.step_profile as module

    before = dict(os.environ)
    importlib.reload(module)
    assert dict(os.environ) == before


def steps(shape: list[tuple[int, int]], dt: float = 0.01) -> list[list[object]]:
    """Model steps ``dt`` apart with (requests, tokens) each, no CUDA events."""
    return [[i * dt, r, t, None, None] for i, (r, t) in enumerate(shape)]


def test_the_window_is_the_longest_run_of_pure_decode_at_the_batch() -> None:
    shape = [(4, 400), (4, 4), (4, 4), (3, 3), (4, 4), (4, 4), (4, 4), (4, 5), (4, 4)]
    assert window(steps(shape), 4) == (4, 6)
    assert window(steps(shape), 3) == (3, 3)
    assert window(steps(shape), 8) is None


def test_summarize_divides_each_part_by_the_model_steps_of_the_window() -> None:
    rec = Recorder()
    rec.steps = steps([(2, 200)] + [(2, 2)] * 12, dt=0.010)
    # one 1 ms schedule and one 0.5 ms kv_alloc per step, 2 ms of execute
    for i in range(13):
        t = i * 0.010
        rec.spans += [("schedule", t - 0.002, t - 0.001), ("kv_alloc", t - 0.002, t - 0.0015)]
        rec.spans += [("execute", t, t + 0.002)]
    row = summarize(rec, 2, trim=2)
    assert row is not None
    # window steps 1..12, trimmed to 3..10: 7 model steps of 10 ms
    assert row["steps"] == 7
    assert row["step_ms"] == pytest.approx(10.0)
    assert row["execute_ms"] == pytest.approx(2.0)
    # schedule spans start 2 ms before their step: those of steps 4..10 fall in [t3, t10)
    assert row["schedule_ms"] == pytest.approx(1.0)
    assert row["kv_alloc_ms"] == pytest.approx(0.5)
    assert "gpu_ms" not in row  # no CUDA


def test_summarize_needs_a_long_enough_window() -> None:
    rec = Recorder()
    rec.steps = steps([(2, 2)] * 5)
    assert summarize(rec, 2, trim=2) is None


def test_prompt_ids_stay_below_the_models_vocabulary(tmp_path: Path) -> None:
    # A shape model made with the tiny tokenizer has its 1,024 ids: ids drawn below 32,000
    # indexed out of the embedding on the GPU (a device-side assert, 2026-12-05).
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1024}))
    assert model_vocab(str(tmp_path)) == 1024
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 7}}))
    assert model_vocab(str(tmp_path)) == 7
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="pass --vocab"):
        model_vocab(str(tmp_path))


@pytest.mark.engine
def test_stock_and_proxima_profiles_on_the_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "profile.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_COMPILE_DISABLE": "1"}
    for mode in ("stock", "proxima"):
        proc = subprocess.run(
            [sys.executable, "-m", "proxima_bench.engine.step_profile", "--mode", mode,
             "--model", str(MODEL), "--batches", "1,8,64",
             "--prompt-len", "32", "--output-len", "24", "--max-num-seqs", "8",
             "--max-model-len", "256", "--kv-bytes", str(32 << 20), "--enforce-eager",
             "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "SKIPPED batch 64: over --max-num-seqs 8" in proc.stdout
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["mode"], r["batch"]) for r in rows) == [
        ("proxima", 1), ("proxima", 8), ("stock", 1), ("stock", 8),
    ]  # fmt: skip
    for r in rows:
        assert r["engine"]["scheduler_cls"] == ("ProximaScheduler" if r["mode"] == "proxima"
                                                else "Scheduler")  # fmt: skip
        assert all(r["engine"]["wrapped"].values())
        assert r["steps"] >= 10
        # the parts are inside the step, the nested ones inside theirs
        assert r["schedule_ms"] > 0 and 0 < r["execute_ms"] <= r["step_ms"]
        assert r["kv_alloc_ms"] <= r["schedule_ms"] and r["prepare_ms"] <= r["execute_ms"]
        assert r["host_ms"] <= r["step_ms"] * 1.01
        # the process's host speed, taken before and after the batch
        assert r["probe_ms"] > 0 and r["probe_after_ms"] > 0
    table = report(rows)
    assert table.count("| on | 8 |") == 2 and "| on | 1 | proxima |" in table


def test_the_report_keeps_each_run_apart_and_compares_within_it() -> None:
    def row(mode: str, tag: str, step: float, probe: float | None = None) -> dict:
        parts = {f"{p}_ms": 0.1 for p in ("schedule", "kv_alloc", "update", "execute",
                                          "prepare", "sample")}  # fmt: skip
        # before and after the batch: the mean is what the report shows
        extra = {} if probe is None else {"probe_ms": probe - 1, "probe_after_ms": probe + 1}
        return {"mode": mode, "tag": tag, "prefix_caching": "on", "batch": 512,
                "step_ms": step, **parts, **extra}  # fmt: skip

    table = report([row("stock", "r1", 20.0, 4.0), row("proxima", "r1", 22.0, 6.0),
                    row("proxima", "r2", 20.0), row("stock", "r2", 25.0)])  # fmt: skip
    lines = [x for x in table.splitlines() if x.startswith("| on | 512 |")]
    assert len(lines) == 4
    # r1: proxima's process probed 1.5x slower than stock's, beside its 1.1x step
    assert lines[0].endswith("| 4.00 | – |")
    assert lines[1].startswith("| on | 512 | proxima | r1 |")
    assert lines[1].endswith("| 1.100 | 6.00 (1.50) | – |")
    # rows from before the probe existed still render
    assert lines[3].startswith("| on | 512 | proxima | r2 |")
    assert lines[3].endswith("| 0.800 | – | – |")


def test_the_host_probe_is_the_median_round_of_its_fixed_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A clock whose rounds take 3, 50 (one slow outlier), 4, 2 and 5 ms: the median, 4 ms,
    # is the probe, so one hiccup inside a probe does not move it.
    import types

    import proxima_bench.engine.step_profile as sp

    stamps = iter([0.0, 0.003, 1.0, 1.050, 2.0, 2.004, 3.0, 3.002, 4.0, 4.005])
    monkeypatch.setattr(sp, "time", types.SimpleNamespace(perf_counter=lambda: next(stamps)))
    assert host_probe(rounds=5) == 4.0
    monkeypatch.undo()
    assert host_probe(rounds=3) > 0  # the real clock: some time, whatever the host


def test_summarize_reports_the_sm_clock_over_the_window_only() -> None:
    # On an H100 at its power cap the SM clock dipped inside one-second windows; the profile
    # records it beside gpu_ms so two runs' GPU times can be read against their clocks.
    rec = Recorder()
    rec.steps = steps([(2, 2)] * 12, dt=0.010)  # window 0..11, trimmed to 2..9: [0.02, 0.09)
    rec.clocks = [
        (0.005, 345, False),  # before the window: idle clock, left out
        (0.025, 1980, False),
        (0.045, 1500, True),
        (0.065, 1980, False),
        (0.085, 1740, True),
        (0.095, 300, True),  # after it
    ]
    row = summarize(rec, 2, trim=2)
    assert row is not None
    assert row["sm_clock_mhz_min"] == 1500
    assert row["sm_clock_mhz_mean"] == pytest.approx((1980 + 1500 + 1980 + 1740) / 4, abs=0.1)
    assert row["power_capped"] == 0.5
    assert row["clock_samples"] == 4
    rec.clocks = []
    assert "sm_clock_mhz_mean" not in (summarize(rec, 2, trim=2) or {})


def test_the_clock_sampler_appends_readings_until_stopped() -> None:
    import time

    from proxima_bench.engine.step_profile import ClockSampler

    rec = Recorder()
    reads = iter([(1980, False), (1500, True)] + [(1700, False)] * 1000)
    sampler = ClockSampler(rec, lambda: next(reads), interval=0.001)
    sampler.start()
    deadline = time.monotonic() + 5
    while len(rec.clocks) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    sampler.stop()
    n = len(rec.clocks)
    assert n >= 3
    assert [c[1:] for c in rec.clocks[:2]] == [(1980, False), (1500, True)]
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(rec.clocks))
    time.sleep(0.02)
    assert len(rec.clocks) == n  # stopped means stopped


def test_the_report_shows_the_clock_where_it_was_sampled() -> None:
    base = {"prefix_caching": "on", "batch": 128, "tag": "r1", "fits": True}
    parts = dict.fromkeys(
        ["gpu_ms", "gpu_idle_ms", "schedule_ms", "kv_alloc_ms", "update_ms", "execute_ms",
         "prepare_ms", "sample_ms"], 1.0)  # fmt: skip
    rows = [
        {**base, **parts, "mode": "stock", "step_ms": 7.0},
        {
            **base,
            **parts,
            "mode": "proxima",
            "step_ms": 7.0,
            "sm_clock_mhz_mean": 1843.2,
            "sm_clock_mhz_min": 1425,
            "power_capped": 0.25,
        },  # fmt: skip
    ]
    text = report(rows)
    assert "| 1843 (1425), 25% |" in text
    assert text.count("| – |") >= 1  # stock's row had no clock


def test_the_nvml_sampler_reads_the_visible_device_and_its_power_reasons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    import vllm.third_party

    from proxima_bench.engine.step_profile import POWER_REASONS, ClockSampler

    fake = types.ModuleType("pynvml")
    asked: list[object] = []
    fake.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: asked.append(i) or f"gpu{i}"  # type: ignore[attr-defined]
    fake.nvmlDeviceGetClockInfo = lambda h, kind: 1425 if kind == 1 else 0  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.third_party.pynvml", fake)
    monkeypatch.setattr(vllm.third_party, "pynvml", fake, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    sampler = ClockSampler.nvml(Recorder())
    assert sampler is not None and asked == [3]
    assert sampler.read() == (1425, True) and POWER_REASONS & 0x4
    # a driver without reasons still gives the clock
    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 1 / 0  # type: ignore[attr-defined]
    assert ClockSampler.nvml(Recorder()).read() == (1425, False)  # type: ignore[union-attr]
    # no NVML at all: no sampler, the profile runs without clocks
    fake.nvmlInit = lambda: 1 / 0  # type: ignore[attr-defined]
    assert ClockSampler.nvml(Recorder()) is None
