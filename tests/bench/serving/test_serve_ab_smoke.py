"""CPU smoke of the serving A/B: tiny model, ``--proxima off`` then ``on``.

Runs ``python -m proxima_bench.serving.ab --preset cpu-smoke`` (2 points,
concurrency 1 and 4, 16 requests each: a few seconds of load per mode plus one
server start per mode) and checks the outputs, that both modes served every
request, that prompt lengths were token-exact on the server, and that no
process is left behind; then the planner's ``--check`` on the result. A second
test interrupts a run during server start-up and checks the clean-up.

Needs the patched vLLM and vllm_proxima importable in a subprocess (the dev
overlay on ``PYTHONPATH`` or the installed wheel) and ``models/tiny-llama``.
"""

from __future__ import annotations

import json
import os
import re
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
SERVE_AB = "proxima_bench.serving.ab"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_NO_USAGE_STATS="1",
        TORCH_COMPILE_DISABLE="1",
    )
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


def _group_alive(pid: int) -> bool:
    from proxima_bench.serving.server import group_alive

    return group_alive(pid)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("serve-ab")
    cmd = [
        sys.executable,
        "-m",
        SERVE_AB,
        "--preset",
        "cpu-smoke",
        "--model",
        str(MODEL),
    ]
    cmd += ["--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd,
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    wall = time.monotonic() - t0
    print(f"\nserve_ab cpu-smoke wall time: {wall:.1f} s\n{proc.stdout[-3000:]}")
    assert proc.returncode == 0, (
        f"serve_ab failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    raw = json.loads((out / "raw.json").read_text())
    return {"out": out, "raw": raw, "stdout": proc.stdout, "wall_s": wall}


def test_outputs_exist(smoke: dict[str, Any]) -> None:
    out: Path = smoke["out"]
    for name in (
        "raw.json",
        "report.md",
        "command.txt",
        "server-off.log",
        "server-on.log",
        "bench.log",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for name in ("throughput.png", "latency_p95.png", "kv_usage.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG", name
    command = (out / "command.txt").read_text()
    assert "proxima_bench.serving.ab --preset cpu-smoke" in command
    raw = smoke["raw"]
    assert raw["status"] == "done"
    assert raw["machine"]["cpu_count"] and raw["git"]["commit"]
    assert len(list((out / "workloads").glob("point-*.jsonl"))) == 2


def test_both_modes_served_every_request(smoke: dict[str, Any]) -> None:
    raw = smoke["raw"]
    assert list(raw["modes"]) == ["off", "on"]
    for label, record in raw["modes"].items():
        assert record["error"] is None
        assert record["server"]["log_facts"]["mode"] == label  # the server says so
        assert [r["point"]["label"] for r in record["runs"]] == ["c=1", "c=4"]
        for run in record["runs"]:
            assert run["error"] is None
            m = run["metrics"]
            assert m["completed"] == 16 and m["failed"] == 0
            assert m["p95_e2el_ms"] > 0 and m["output_throughput"] > 0
            checks = run["checks"]
            assert checks["client_prompt_len_mismatches"] == 0
            # token-exact prompts: the server counted exactly the file's lengths
            assert checks["server_prompt_tokens"] == checks["expected_prompt_tokens"]
            assert checks["server_generation_tokens"] == checks["expected_output_tokens"]
            assert checks["client_output_tokens"] == checks["expected_output_tokens"]
            assert run["summary"]["samples"] >= 2
            assert run["summary"]["preemptions"] == 0
            assert run["summary"]["peak_gpu_memory_mib"] is None  # no GPU here
    on_series = raw["modes"]["on"]["runs"][0]["metrics_series"]["values"]
    off_series = raw["modes"]["off"]["runs"][0]["metrics_series"]["values"]
    # The paged layout (the default since it was made so): 16,384 slots are 128 CPU pages of
    # 128 tokens, less vLLM's null page.
    assert max(v for v in on_series["proxima:kv_slots_total"] if v is not None) == 127 * 128
    # --proxima off exports one proxima series only: the mode it runs in (proxima:mode_info).
    assert {n for n in off_series if n.startswith("proxima:")} <= {"proxima:mode_info"}
    assert "vllm:kv_cache_usage_perc" in on_series and "vllm:num_requests_running" in off_series


def test_report_has_both_modes_at_every_point(smoke: dict[str, Any]) -> None:
    text = (smoke["out"] / "report.md").read_text()
    for point in ("### c=1", "### c=4"):
        section = text.split(point, 1)[1].split("###", 1)[0]
        assert re.search(r"^\| off \| 16 \| 0 \|", section, re.MULTILINE)
        assert re.search(r"^\| on \| 16 \| 0 \|", section, re.MULTILINE)
    assert "Knee:" in text and "- **off**:" in text and "- **on**:" in text


def test_nothing_left_running(smoke: dict[str, Any]) -> None:
    raw = smoke["raw"]
    pids = [record["server"]["pid"] for record in raw["modes"].values()]
    pids += [p for record in raw["modes"].values() for p in record.get("bench_runner_pids", [])]
    assert len(pids) >= 3
    for pid in pids:
        assert not _group_alive(pid), f"process group {pid} still running"
    for record in raw["modes"].values():
        assert record["server"]["exit_code"] is not None


def test_planner_check_matches_the_servers_capacity(smoke: dict[str, Any]) -> None:
    from proxima_bench.planner import plan as planner

    result = planner.check(smoke["raw"], trials=100)
    assert result["modes"]["on"]["capacity_match"] is True
    assert result["modes"]["on"]["predicted_usable_tokens"] == 127 * 128  # paged: as stock
    assert result["modes"]["on"]["layout"] == "proxima-paged"
    assert result["modes"]["off"]["capacity_match"] is True
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxima_bench.planner",
            "--check",
            str(smoke["out"] / "raw.json"),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(": OK") == 2


def test_sigterm_during_startup_stops_everything(tmp_path: Path) -> None:
    out = tmp_path / "interrupted"
    cmd = [
        sys.executable,
        "-m",
        SERVE_AB,
        "--preset",
        "cpu-smoke",
        "--model",
        str(MODEL),
    ]
    cmd += ["--modes", "on", "--out", str(out)]
    proc = subprocess.Popen(
        cmd,
        env=_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        raw_path = out / "raw.json"
        deadline = time.monotonic() + 120
        pids: list[int] = []
        while time.monotonic() < deadline and not pids:
            time.sleep(0.5)
            try:
                record = json.loads(raw_path.read_text())["modes"]["on"]
            except (OSError, ValueError, KeyError):
                continue
            if record.get("bench_runner_pids"):
                pids = [record["server"]["pid"], *record["bench_runner_pids"]]
        assert pids, "serve_ab never recorded its server and runner"
        time.sleep(2)
        assert all(_group_alive(pid) for pid in pids)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout[-3000:]
    assert "interrupted" in stdout
    assert json.loads((out / "raw.json").read_text())["status"] == "interrupted"
    for pid in pids:
        assert not _group_alive(pid), f"process group {pid} still running"
