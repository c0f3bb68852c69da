"""CPU smoke of the serving matrix: tiny model, three servers up at once.

Runs ``python -m proxima_bench.serving.matrix`` with serve_ab's CPU server
arguments, a third mode ``--mode admit-stock='--proxima-admission stock'``,
``--scale 0.1`` and the points mix-c8, mix-burst, mixed-c64, chat-c64 and
parity, one repeat: ~115-140 s on a 2-core machine (three concurrent server
starts of ~90-115 s, ~16 s of load; with two modes it took ~75 s), then
checks what it wrote: every request completed on every mode with token-exact
prompts, the order rotated, the ratios of both proxima modes, the
``proxima:*_total`` counter deltas, the parity point is (nearly) identical
(the same CPU kernels run in every mode), per-class latencies of the mixed
stream, the report, and that no process is left running. A second test
interrupts a two-mode run while both servers start and checks the clean-up.

Needs the patched vLLM and vllm_proxima importable in a subprocess (the dev
overlay on ``PYTHONPATH`` or the installed wheel) and ``models/tiny-llama``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[3]
MODEL = REPO / "models" / "tiny-llama"
POINTS = ("mix-c8", "mix-burst", "mixed-c64", "chat-c64", "parity")
MODES = ("stock", "proxima", "admit-stock")
EXTRA_MODE = "admit-stock=--proxima-admission stock"
SERVER_ARGS = (
    "--enforce-eager --dtype float32 --max-model-len 1024 --kv-cache-memory-bytes 16777216"
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_NO_USAGE_STATS="1",
        TORCH_COMPILE_DISABLE="1",
    )
    env.pop("PROXIMA_MODE", None)  # the proxima server runs the distribution's default
    return env


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    if not (MODEL / "config.json").is_file():
        pytest.skip(f"{MODEL} missing (bash scripts/setup.sh makes it)")
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import importlib.util as u, sys; "
                "sys.exit(0 if u.find_spec('vllm') and u.find_spec('vllm_proxima') else 1)"
            ),
        ],
        env=_env(),
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("vllm and vllm_proxima are not importable (set PYTHONPATH or install)")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("matrix")
    cmd = [
        sys.executable,
        "-m",
        "proxima_bench.serving.matrix",
        "--model",
        str(MODEL),
        "--server-args",
        SERVER_ARGS,
        "--mode",
        EXTRA_MODE,
        "--env",
        "TORCH_COMPILE_DISABLE=1",
        "--scale",
        "0.1",
        "--points",
        ",".join(POINTS),
        "--budget-s",
        "900",
        "--out",
        str(out),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=900, check=False
    )
    wall = time.monotonic() - t0
    print(f"\nmatrix CPU smoke wall time: {wall:.1f} s\n{proc.stdout[-4000:]}")
    assert proc.returncode == 0, (
        f"matrix failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    raw = json.loads((out / "raw.json").read_text())
    return {"out": out, "raw": raw, "stdout": proc.stdout, "wall_s": wall}


def _entry(raw: dict[str, Any], point: str) -> dict[str, Any]:
    (entry,) = [e for e in raw["runs"] if e["point"] == point]
    return entry


def test_outputs_and_servers(smoke: dict[str, Any]) -> None:
    out: Path = smoke["out"]
    for name in (
        "raw.json",
        "report.md",
        "command.txt",
        *(f"server-{m}.log" for m in MODES),
        "bench.log",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "matrix-ratio.png").read_bytes()[:4] == b"\x89PNG"
    assert "proxima_bench.serving.matrix --model" in (out / "command.txt").read_text()
    raw = smoke["raw"]
    assert raw["status"] == "done" and raw["skipped"] == []
    assert raw["machine"]["cpu_count"] and raw["git"]["commit"]
    assert raw["start"]["method"] in ("concurrent", "sequential")
    assert raw["config"]["modes"] == list(MODES)
    for mode, want in (("stock", "off"), ("proxima", "on"), ("admit-stock", "on")):
        server = raw["servers"][mode]
        assert server["log_facts"]["mode"] == want  # the server says so
        assert server["startup_s"] > 0 and server["started_at"]
        assert server["exit_code"] is not None
        assert server["warmup"]["failed"] == 0
    assert "--proxima" not in raw["servers"]["proxima"]["command"]
    assert "--proxima" not in raw["servers"]["admit-stock"]["command"]
    assert raw["servers"]["admit-stock"]["command"][-2:] == ["--proxima-admission", "stock"]
    assert raw["servers"]["stock"]["command"][-9:-7] == ["--proxima", "off"]


def test_every_request_completed_on_every_mode(smoke: dict[str, Any]) -> None:
    raw = smoke["raw"]
    assert [e["point"] for e in raw["runs"]] == list(POINTS)
    for i, entry in enumerate(raw["runs"]):
        # point i starts with mode i mod 3, in the listed order
        assert entry["order"] == [*MODES[i % 3 :], *MODES[: i % 3]]
        assert set(entry["modes"]) == set(MODES)
        assert set(entry["ratios"]) == {"proxima", "admit-stock"}
        assert all(r is not None and r > 0 for r in entry["ratios"].values())
        assert entry["ratio"] == entry["ratios"]["proxima"]
        for mode, run in entry["modes"].items():
            tag = f"{entry['point']} {mode}"
            assert run["error"] is None, tag
            checks = run["checks"]
            assert checks["all_completed"], tag
            assert run["metrics"]["completed"] == checks["requests"] > 0, tag
            assert run["metrics"]["output_throughput"] > 0, tag
            # token-exact prompts and outputs, as the server counts them
            assert checks["server_prompt_tokens"] == checks["expected_prompt_tokens"], tag
            assert checks["client_output_tokens"] == checks["expected_output_tokens"], tag
            if entry["point"] != "parity":
                assert checks["client_prompt_len_mismatches"] == 0, tag
                assert checks["server_generation_tokens"] == checks["expected_output_tokens"]
            if entry["point"] != "parity":  # how the run ended, from the detailed result
                tail = run["tail"]
                assert tail["requests"] == checks["requests"], tag
                assert 0 < tail["end_s"]["p50"] <= tail["end_s"]["max"], tag
                assert tail["last"][0]["end_s"] == tail["end_s"]["max"], tag
                assert tail["last"][0]["output"] > 0, tag
            counters = run["counters"]
            assert counters["preemptions"] == 0, tag
            assert counters["prefix_cache_queries"] >= counters["prefix_cache_hits"] >= 0
            # proxima:*_total deltas: none from stock (proxima off), what the
            # scheduler exports from the others
            proxima = counters["proxima"]
            assert all(k.startswith("proxima:") and k.endswith("_total") for k in proxima)
            assert "proxima:kv_slots_total" not in proxima, tag  # a gauge, left out
            assert all(v >= 0 for v in proxima.values()), tag
            if mode == "stock":
                assert proxima == {}, tag
            elif "proxima:steps_total" in proxima:
                assert proxima["proxima:steps_total"] > 0, tag
    burst = _entry(raw, "mix-burst")
    assert burst["spec"]["max_concurrency"] is None and burst["spec"]["num_requests"] == 100
    for mode in MODES:  # every mode got the same file
        assert burst["modes"][mode]["bench_argv"].count(burst["workload"]["file"]) == 1


def test_mixed_classes_and_chat_turns(smoke: dict[str, Any]) -> None:
    mixed = _entry(smoke["raw"], "mixed-c64")
    for run in mixed["modes"].values():
        classes = run["classes"]
        assert set(classes) == {"short", "long"}
        assert classes["short"]["requests"] + classes["long"]["requests"] == 30
        assert classes["long"]["requests"] == 3
        for stats in classes.values():
            assert stats["completed"] == stats["requests"]
            assert 0 < stats["p50_ttft_ms"] <= stats["p95_ttft_ms"]
            assert stats["p95_ttft_ms"] <= stats["p95_e2el_ms"]
    chat = _entry(smoke["raw"], "chat-c64")
    for run in chat["modes"].values():
        assert set(run["classes"]) == {"turn-1", "turn-2", "turn-3", "turn-4"}


def test_parity_identical_on_cpu(smoke: dict[str, Any]) -> None:
    entry = _entry(smoke["raw"], "parity")
    assert set(entry["parity_vs_stock"]) == {"admit-stock"}
    for parity in (entry["parity"], entry["parity_vs_stock"]["admit-stock"]):
        assert parity["failed"] == 0 and parity["compared"] == parity["requests"] == 26
        # the same CPU kernels run in every mode: expect all identical, allow a little
        assert parity["identical"] >= 0.9 * parity["requests"], parity
        assert parity["token_agreement"] >= 0.9
        assert parity["divergences"] == parity["requests"] - parity["identical"]
    detail = json.loads(Path(entry["modes"]["stock"]["detail_file"]).read_text())
    first = detail["requests"][0]
    assert len(first["tokens"]) == 13 and len(first["top"]) == 13
    assert all(len(step) >= 5 for step in first["top"])  # top-5 (+ the chosen token)


def test_report_lists_every_point(smoke: dict[str, Any]) -> None:
    text = (smoke["out"] / "report.md").read_text()
    for point in POINTS:
        assert f"| {point} |" in text, point
    assert "| admit-stock tok/s |" in text and "| admit-stock / stock |" in text
    assert "### mixed-c64: per class (stock / proxima / admit-stock)" in text
    assert "| long |" in text
    assert "### Greedy parity" in text and "admit-stock vs stock: **" in text
    assert "matrix-ratio.png" in text
    steps = [
        e["modes"][m]["counters"]["proxima"].get("proxima:steps_total")
        for e in smoke["raw"]["runs"]
        for m in MODES[1:]
    ]
    if any(steps):  # the scheduler exports its step counters
        assert "### Scheduler CPU per step (ms)" in text
    assert "### How the runs ended" in text and "| mix-burst | proxima | " in text


def test_nothing_left_running(smoke: dict[str, Any]) -> None:
    from proxima_bench.serving.server import group_alive

    raw = smoke["raw"]
    pids = [raw["servers"][m]["pid"] for m in MODES]
    pids += raw["bench_runner_pids"]
    assert len(pids) >= 4
    for pid in pids:
        assert not group_alive(pid), f"process group {pid} still running"


def test_sigterm_during_startup_stops_both_servers(tmp_path: Path) -> None:
    from proxima_bench.serving.server import group_alive

    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "proxima_bench.serving.matrix", "--model", str(MODEL)]
    cmd += ["--server-args", SERVER_ARGS, "--points", "mix-c8", "--out", str(out)]
    proc = subprocess.Popen(
        cmd, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        pids: list[int] = []
        while time.monotonic() < deadline and not pids:
            time.sleep(0.5)
            try:
                raw = json.loads((out / "raw.json").read_text())
            except (OSError, ValueError):
                continue
            if raw.get("bench_runner_pids") and len(raw["servers"]) == 2:
                pids = [raw["servers"][m]["pid"] for m in ("stock", "proxima")]
                pids += raw["bench_runner_pids"]
        assert pids, "the matrix never recorded its servers and runner"
        time.sleep(2)
        assert all(group_alive(pid) for pid in pids)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout[-3000:]
    assert "interrupted" in stdout
    raw = json.loads((out / "raw.json").read_text())
    assert raw["status"] == "interrupted"
    for pid in pids:
        assert not group_alive(pid), f"process group {pid} still running"
