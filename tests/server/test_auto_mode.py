"""``--proxima auto`` (the default) through the OpenAI server: every ``--proxima*`` flag is
accepted, a configuration proxima mode cannot run starts as stock vLLM with the reason in
the start line and in ``proxima:mode_info``, and ``--proxima on`` refuses the same flags."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server.test_server import CPU_FLAGS, MODEL, SERVED, Server, env, free_port

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="tiny model missing"),
]

# Every proxima flag; --block-size 128 is what the token layout cannot run.
FLAGS = [
    "--proxima-kv-layout", "token", "--proxima-admission", "conservative",
    "--proxima-horizon", "64", "--proxima-overcommit", "0.1", "--proxima-evict", "arc",
    "--proxima-debug-invariants", "--block-size", "128",
]  # fmt: skip
REASON = "--block-size 128 (KV layout token)"


def test_auto_steps_aside_to_stock_and_says_why(tmp_path: Path) -> None:
    server = Server(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL)]
        + [*CPU_FLAGS, "--proxima", "auto", *FLAGS],
        tmp_path / "auto.log",
    )
    try:
        server.wait()
        body = {"model": SERVED, "prompt": "Hello", "max_tokens": 5, "temperature": 0}
        assert json.loads(server.post("/v1/completions", body))["usage"]["completion_tokens"] == 5
        log = server.log.read_text()
        assert f"proxima off (auto: stepped aside for {REASON}; stock vLLM behaviour" in log
        text = ""
        for _ in range(20):
            text = server.get("/metrics").decode()
            if "proxima:mode_info{" in text:
                break
            time.sleep(0.5)
        info = [line for line in text.splitlines() if line.startswith("proxima:mode_info{")]
        assert len(info) == 1 and 'mode="off"' in info[0], info
        assert f'reason="{REASON}"' in info[0], info
        assert info[0].endswith(" 1.0")
        assert "proxima:kv_slots_total{" not in text  # stock's scheduler: no proxima figures
    finally:
        server.stop()


def test_explicit_on_refuses_the_same_flags() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL)]
        + [*CPU_FLAGS, "--port", str(free_port()), "--proxima", "on", *FLAGS],
        env=env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode != 0
    assert "--block-size 128 conflicts with --proxima-kv-layout token" in proc.stdout + proc.stderr
