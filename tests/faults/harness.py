"""Helpers of the fault tests: CPU servers of the tiny model in each mode, /metrics, processes.

A server runs the tiny model with a 4 MiB KV cache (3,968 slots in the paged layout: 31 pages of
128; ~4k slots in the token layout), small enough that a few dozen concurrent requests queue for
admission and get preempted.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxima_bench.serving.metrics_scrape import scrape
from proxima_bench.serving.server import Server, ServerError

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "tiny-llama"
SERVED = "tiny"
VOCAB = 1024
MAX_MODEL_LEN = 1024
KV_BYTES = 4 << 20
SHUTDOWN_TIMEOUT_S = 30  # --shutdown-timeout: SIGTERM drains in-flight requests this long

CPU_FLAGS: tuple[str, ...] = (
    "--enforce-eager",
    "--dtype",
    "float32",
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--kv-cache-memory-bytes",
    str(KV_BYTES),
    "--served-model-name",
    SERVED,
    "--shutdown-timeout",
    str(SHUTDOWN_TIMEOUT_S),
    "--disable-uvicorn-access-log",
)

MODES: dict[str, tuple[str, ...]] = {
    "off": ("--proxima", "off"),
    "paged": (),
    "token": ("--proxima-kv-layout", "token"),
}
"""Server flags per mode: stock vLLM, proxima's default (paged) layout, the token layout."""

ENV = {"TORCH_COMPILE_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}


def start_server(mode: str, log_dir: Path, tag: str = "") -> Server:
    """Start a server in ``mode`` and wait until ``/health`` answers."""
    server = Server(str(MODEL), [*CPU_FLAGS, *MODES[mode]], log_dir / f"{mode}{tag}.log", env=ENV)
    server.start()
    try:
        server.wait_healthy(timeout=300)
    except ServerError:
        server.stop()
        raise
    return server


def metrics(server: Server) -> dict[str, float]:
    """The watched ``vllm:*`` series and every ``proxima:*`` series, one value each."""
    return scrape(server.base_url)


def wait_for(
    probe: Callable[[], dict[str, float]],
    done: Callable[[dict[str, float]], bool],
    timeout: float,
    every: float = 0.5,
) -> tuple[bool, dict[str, float]]:
    """Poll ``probe`` until ``done`` holds for its value; (held, last value)."""
    deadline = time.monotonic() + timeout
    last: dict[str, float] = {}
    while True:
        with contextlib.suppress(OSError):
            last = probe()
            if done(last):
                return True, last
        if time.monotonic() > deadline:
            return False, last
        time.sleep(every)


def post_json(server: Server, path: str, body: dict[str, Any], timeout: float = 60) -> Any:
    """POST a JSON body; the decoded JSON answer (raises on HTTP errors)."""
    req = urllib.request.Request(
        server.base_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def health_status(server: Server, timeout: float = 2.0) -> int:
    """``GET /health``'s status code; 0 when nothing answers (refused, reset, timed out)."""
    try:
        with urllib.request.urlopen(server.base_url + "/health", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return sorted(
            int(c) for t in tasks for c in (t / "children").read_text().split() if c.isdigit()
        )
    except OSError:
        return []


def process_name(pid: int) -> str:
    """The process title (vLLM renames its processes, e.g. ``VLLM::EngineCore``)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace").strip()


def engine_core_pid(server: Server) -> int:
    """The EngineCore child process of the API server."""
    assert server.proc is not None
    found = [p for p in children(server.proc.pid) if "EngineCore" in process_name(p)]
    if len(found) != 1:
        raise AssertionError(f"expected one EngineCore child, found {found}")
    return found[0]


def signal_pid(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to one process (not its group)."""
    os.kill(pid, sig)


def require_vllm_and_model() -> str | None:
    """Why the fault tests cannot run here, or None."""
    if not (MODEL / "config.json").is_file():
        return f"{MODEL} missing (bash scripts/setup.sh makes it)"
    return None


class StreamWatcher(threading.Thread):
    """One streaming completion in a thread, recording how it ended.

    ``outcome`` once finished: ``complete`` (``max_tokens`` tokens, finish_reason ``length``,
    ``[DONE]``), ``error-event`` (the server sent an error in the stream), ``cut`` (anything
    else: no ``[DONE]``, another finish reason or fewer tokens; ``detail`` says which),
    ``http-<status>``, or ``exception:<type>``.

    Tokens are counted from the stream's closing ``usage`` chunk, not from the number of chunks:
    vLLM merges the deltas a slow reader has not yet taken (``RequestOutputCollector``), so on a
    busy machine one chunk can carry several tokens. A server that sends no usage chunk falls back
    to the chunk count.
    """

    def __init__(self, server: Server, max_tokens: int, prompt: list[int]) -> None:
        super().__init__(daemon=True)
        self.url = server.base_url + "/v1/completions"
        self.max_tokens = max_tokens
        self.body = {
            "model": SERVED,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self.chunks = 0
        self.tokens: int | None = None  # completion_tokens of the usage chunk
        self.outcome = "running"
        self.detail = ""
        self.started = threading.Event()  # set on the first token chunk

    def run(self) -> None:
        req = urllib.request.Request(
            self.url, json.dumps(self.body).encode(), {"Content-Type": "application/json"}
        )
        finish, done, error = None, False, False
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                for raw in r:
                    line = raw.decode(errors="replace").strip()
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        error = error or "error" in chunk
                        usage = chunk.get("usage") or {}
                        if "completion_tokens" in usage:
                            self.tokens = int(usage["completion_tokens"])
                        for choice in chunk.get("choices") or []:
                            self.chunks += 1
                            finish = choice.get("finish_reason") or finish
                            self.started.set()
        except urllib.error.HTTPError as e:
            self.outcome = f"http-{e.code}"
            return
        except (OSError, http.client.HTTPException) as e:
            self.outcome = f"exception:{error_name(e)}"
            return
        finally:
            self.started.set()
        tokens = self.chunks if self.tokens is None else self.tokens
        if error:
            self.outcome = "error-event"
        elif done and finish == "length" and tokens == self.max_tokens:
            self.outcome = "complete"
        else:
            self.outcome = "cut"
            self.detail = f"done={done} finish={finish} tokens={tokens} chunks={self.chunks}"


def request_outcome(server: Server, timeout: float = 30) -> str:
    """A small non-streaming completion: ``200``, ``http-<status>``, or ``exception:<type>``."""
    body = {"model": SERVED, "prompt": "after the fault", "max_tokens": 2}
    try:
        post_json(server, "/v1/completions", body, timeout=timeout)
        return "200"
    except urllib.error.HTTPError as e:
        return f"http-{e.code}"
    except (OSError, http.client.HTTPException) as e:
        return f"exception:{error_name(e)}"


def error_name(e: BaseException) -> str:
    """The exception's type, with the reason's type for ``URLError`` (e.g. a refused connection)."""
    reason = getattr(e, "reason", None)
    if isinstance(e, urllib.error.URLError) and isinstance(reason, BaseException):
        return f"{type(e).__name__}({type(reason).__name__})"
    return type(e).__name__


def wait_exit(server: Server, timeout: float) -> tuple[int | None, float]:
    """Wait up to ``timeout`` s for the server process to exit: (exit code or None, seconds)."""
    assert server.proc is not None
    t0 = time.monotonic()
    try:
        code: int | None = server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - t0


def watch_until_exit(server: Server, timeout: float, every: float = 0.2) -> dict[str, Any]:
    """Poll ``/health`` until the server process exits or ``timeout`` passes.

    Returns the health statuses seen (consecutive repeats dropped; 0: nothing answered), the
    exit code (None: still running) and the seconds to exit.
    """
    assert server.proc is not None
    t0 = time.monotonic()
    seen: list[int] = []
    while server.proc.poll() is None and time.monotonic() - t0 < timeout:
        status = health_status(server, timeout=1.0)
        if not seen or seen[-1] != status:
            seen.append(status)
        time.sleep(every)
    code, _ = wait_exit(server, 0.5)
    return {"health": seen, "exit_code": code, "exit_s": round(time.monotonic() - t0, 1)}


def group_alive_after(server: Server, timeout: float) -> bool:
    """Whether any process of the server's group is still alive ``timeout`` s after its exit."""
    from proxima_bench.serving.server import group_alive

    assert server.proc is not None
    deadline = time.monotonic() + timeout
    while group_alive(server.proc.pid):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.2)
    return False
