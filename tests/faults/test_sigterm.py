"""SIGTERM with requests in flight: proxima drains (or not) exactly as stock vLLM does.

The servers run with ``--shutdown-timeout 30`` (vLLM's drain mode: in-flight requests may finish
for up to 30 s). For ``--proxima off`` and the default (paged) mode: eight streaming requests in
flight, SIGTERM to the API server, one new request half a second later; then compared: how each
in-flight request ended, what the new request got, the exit code, and that no process of the
server is left behind. This file runs last in the folder: it takes the servers the storm and fuzz
tests used.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from typing import Any

import pytest

from tests.faults.conftest import ServerPool
from tests.faults.harness import (
    SHUTDOWN_TIMEOUT_S,
    StreamWatcher,
    group_alive_after,
    request_outcome,
    signal_pid,
    wait_exit,
)

pytestmark = [pytest.mark.server, pytest.mark.faults]

IN_FLIGHT = 8
MAX_TOKENS = 300


def sigterm_in_flight(servers: ServerPool, mode: str) -> dict[str, Any]:
    """SIGTERM a server with :data:`IN_FLIGHT` streams running; what happened to each."""
    server = servers.take(mode)
    assert server.proc is not None
    streams = [
        StreamWatcher(server, MAX_TOKENS, list(range(7 + i, 7 + i + 50 * (i + 1))))
        for i in range(IN_FLIGHT)
    ]
    for s in streams:
        s.start()
    for s in streams:
        assert s.started.wait(60), "a request never started"
    signal_pid(server.proc.pid, signal.SIGTERM)
    time.sleep(0.5)
    new_request = request_outcome(server, timeout=SHUTDOWN_TIMEOUT_S + 30)
    code, exit_s = wait_exit(server, SHUTDOWN_TIMEOUT_S + 60)
    for s in streams:
        s.join(30)
    return {
        "mode": mode,
        "in_flight": dict(Counter(s.outcome for s in streams)),
        "cut_detail": [s.detail for s in streams if s.detail],
        # streams where vLLM merged deltas (fewer chunks than tokens): a slow reader, not a fault
        "merged": sum(s.tokens is not None and s.chunks < s.tokens for s in streams),
        "new_request": new_request,
        "exit_code": code,
        "exit_s": round(exit_s, 1),
        "left_behind": group_alive_after(server, 15.0),
    }


def test_sigterm_drains_like_stock(servers: ServerPool) -> None:
    stock, proxima = (sigterm_in_flight(servers, mode) for mode in ("off", "paged"))
    print(json.dumps({"stock": stock, "proxima": proxima}, indent=1))
    for side in (stock, proxima):
        assert side["exit_code"] is not None, f"no exit after SIGTERM: {side}"
    keys = ("in_flight", "new_request", "exit_code", "left_behind")
    assert {k: proxima[k] for k in keys} == {k: stock[k] for k in keys}
