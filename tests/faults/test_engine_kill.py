"""The engine core process dies (SIGKILL): proxima must do exactly what stock vLLM does.

For ``--proxima off`` and the default (paged) mode, on a fresh server each: one streaming request
in flight, then SIGKILL to the API server's ``VLLM::EngineCore`` child. Compared between the
modes: how the in-flight request ends, what a new request gets right after the kill, whether
``/health`` reported 503 before the server went away, the API server's exit code, and that no
process of the server is left behind. Both must exit within ``EXIT_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import (
    StreamWatcher,
    engine_core_pid,
    group_alive_after,
    request_outcome,
    require_vllm_and_model,
    signal_pid,
    start_server,
    watch_until_exit,
)

pytestmark = [pytest.mark.server, pytest.mark.faults]

EXIT_TIMEOUT_S = 60.0


def kill_engine_core(mode: str, log_dir: Path) -> dict[str, Any]:
    """Start a server, kill its engine core mid-request, and record what follows."""
    server = start_server(mode, log_dir, tag="-kill")
    try:
        stream = StreamWatcher(server, max_tokens=900, prompt=list(range(7, 100)))
        stream.start()
        assert stream.started.wait(60), "the in-flight request never started"
        signal_pid(engine_core_pid(server), signal.SIGKILL)
        new_request: list[str] = []
        late = threading.Timer(0.3, lambda: new_request.append(request_outcome(server)))
        late.start()  # a request right after the kill, while /health is being watched
        watched = watch_until_exit(server, EXIT_TIMEOUT_S)
        late.join(30)
        stream.join(30)
        return {
            "mode": mode,
            "in_flight": stream.outcome,
            "new_request": new_request[0] if new_request else "no answer",
            "health_503": 503 in watched["health"],
            **watched,
            "left_behind": group_alive_after(server, 15.0),
        }
    finally:
        server.stop()


def test_engine_core_sigkill_same_as_stock(tmp_path: Path) -> None:
    why = require_vllm_and_model()
    if why:
        pytest.skip(why)
    stock, proxima = (kill_engine_core(mode, tmp_path) for mode in ("off", "paged"))
    print(json.dumps({"stock": stock, "proxima": proxima}, indent=1))
    for side in (stock, proxima):
        assert side["exit_code"] is not None, f"server still up {EXIT_TIMEOUT_S}s later: {side}"
        assert side["in_flight"] != "complete", f"a request completed without an engine: {side}"
    keys = ("in_flight", "new_request", "health_503", "exit_code", "left_behind")
    assert {k: proxima[k] for k in keys} == {k: stock[k] for k in keys}
