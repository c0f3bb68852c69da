"""The installed OpenAI server, as a user runs it: module form and the ``vllm`` CLI,
proxima on and off, every endpoint the brief names, and clear errors for bad flags."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.versions import UPSTREAM_VLLM

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "tiny-llama"
SERVED = "tiny"
CPU_FLAGS = [
    "--enforce-eager",
    "--dtype",
    "float32",
    "--max-model-len",
    "1024",
    "--kv-cache-memory-bytes",
    str(16 << 20),
    "--served-model-name",
    SERVED,
]

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="tiny model missing"),
]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_HOST_IP="127.0.0.1",
        VLLM_NO_USAGE_STATS="1",
        TORCH_COMPILE_DISABLE="1",
    )
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_cli() -> str:
    return str(Path(sys.executable).with_name("vllm"))


class Server:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env=env(),
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait(self, timeout: float = 240) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(1)
        raise AssertionError(f"server not healthy after {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return r.read()

    def post(self, path: str, body: dict) -> bytes:
        req = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.read()


@pytest.fixture(scope="module")
def proxima_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("srv") / "proxima.log"
    server = Server(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL),
            *CPU_FLAGS,
        ],
        log,
    )
    try:
        server.wait()
        yield server
    finally:
        server.stop()


def test_start_line_names_versions_and_mode(proxima_server: Server) -> None:
    log = proxima_server.log.read_text()
    assert f"proxima-vllm 0.1.0 on vLLM {UPSTREAM_VLLM}: proxima on" in log


def test_models(proxima_server: Server) -> None:
    data = json.loads(proxima_server.get("/v1/models"))
    assert [m["id"] for m in data["data"]] == [SERVED]


def test_completions(proxima_server: Server) -> None:
    body = {"model": SERVED, "prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0}
    data = json.loads(proxima_server.post("/v1/completions", body))
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 12
    assert isinstance(choice["text"], str) and choice["text"]


def test_chat_completions_and_streaming(proxima_server: Server) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say something."},
    ]
    body = {"model": SERVED, "messages": messages, "max_tokens": 10, "temperature": 0}
    data = json.loads(proxima_server.post("/v1/chat/completions", body))
    full = data["choices"][0]["message"]["content"]
    assert data["usage"]["completion_tokens"] == 10
    raw = proxima_server.post("/v1/chat/completions", {**body, "stream": True}).decode()
    chunks = [
        json.loads(line[6:])
        for line in raw.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    assert raw.rstrip().endswith("data: [DONE]")
    streamed = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
    )
    assert streamed == full  # greedy: the stream spells the same answer


def test_metrics_has_vllm_and_proxima_series(proxima_server: Server) -> None:
    proxima_server.post("/v1/completions", {"model": SERVED, "prompt": "metrics", "max_tokens": 4})
    text = ""
    for _ in range(20):  # the stat loggers record on the next engine step
        text = proxima_server.get("/metrics").decode()
        if "proxima:kv_slots_total" in text:
            break
        time.sleep(0.5)
    assert "vllm:kv_cache_usage_perc" in text
    assert "proxima:kv_slots_total" in text
    total = [line for line in text.splitlines() if line.startswith("proxima:kv_slots_total{")]
    # The paged layout: vLLM's CPU blocks of 128 tokens, less the null block.
    pages = [line for line in text.splitlines() if line.startswith("proxima:kv_page_size{")]
    assert pages and float(pages[0].rsplit(" ", 1)[1]) == 128
    assert total and float(total[0].rsplit(" ", 1)[1]) == (16 << 20) // 1024 - 128


def test_metrics_has_every_dashboard_series(proxima_server: Server) -> None:
    """Every series the Grafana dashboard queries is on the server's /metrics, except counters
    that have not counted yet (prometheus_client shows a labelled counter from its first
    increase) and the token layout's prefix counters (the paged layout's prefix cache is vLLM's,
    counted by vllm:prefix_cache_*)."""
    import re

    from tests.unit.test_dashboard import dashboard_json, series_names
    from vllm_proxima.metrics import METRICS

    wanted = series_names(dashboard_json())
    proxima_counters = {name for name, kind, _ in METRICS.values() if kind == "counter"}
    proxima_server.post("/v1/completions", {"model": SERVED, "prompt": "dash", "max_tokens": 4})
    present: set[str] = set()
    for _ in range(20):
        text = proxima_server.get("/metrics").decode()
        present = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines()}
        present |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in present}
        if "proxima:kv_slots_free" in present:
            break
        time.sleep(0.5)
    missing = {
        n
        for n in wanted - present
        if n not in proxima_counters and not n.startswith("proxima:prefix_")
    }
    assert not missing, missing
    assert {"proxima:kv_slots_used", "proxima:kv_slots_cached", "proxima:kv_slots_free"} <= present


def test_vllm_cli_serve_with_proxima_off(tmp_path: Path) -> None:
    server = Server(
        [vllm_cli(), "serve", str(MODEL), *CPU_FLAGS, "--proxima", "off"], tmp_path / "off.log"
    )
    try:
        server.wait()
        body = {"model": SERVED, "prompt": "Hello", "max_tokens": 5, "temperature": 0}
        data = json.loads(server.post("/v1/completions", body))
        assert data["usage"]["completion_tokens"] == 5
        assert f"proxima-vllm 0.1.0 on vLLM {UPSTREAM_VLLM}: proxima off" in server.log.read_text()
        assert "proxima:kv_slots_total{" not in server.get("/metrics").decode()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--proxima", "maybe"], "argument --proxima: invalid choice: 'maybe'"),
        (["--proxima-admission", "greedy"], "argument --proxima-admission: invalid choice"),
        (["--proxima-overcommit", "lots"], "argument --proxima-overcommit: invalid float value"),
        (["--proxima-overcommit", "0.9"], "--proxima-overcommit must be a number in [0.0, 0.5]"),
        (["--proxima-frobnicate", "1"], "unrecognized arguments: --proxima-frobnicate"),
        (["--proxima-kv-layout", "tiles"], "argument --proxima-kv-layout: invalid choice"),
        (
            ["--proxima", "on", "--proxima-kv-layout", "token", "--block-size", "16"],
            "--block-size 16 conflicts with --proxima-kv-layout token",
        ),
        (
            ["--proxima-kv-layout", "paged", "--proxima-evict", "arc"],
            "--proxima-evict arc needs --proxima-kv-layout token",
        ),
        (  # explicit on refuses; the default (auto) would start as stock (test_auto_mode.py)
            ["--proxima", "on", "--decode-context-parallel-size", "2"],
            "does not support yet: context parallelism",
        ),
    ],
)
def test_bad_flags_fail_at_start_with_a_clear_message(flags: list[str], message: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(MODEL),
            *CPU_FLAGS,
            "--port",
            str(free_port()),
            *flags,
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
