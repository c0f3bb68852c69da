"""Client-disconnect storms against a real CPU server, stock and both proxima layouts.

240 requests (seeded, the same plan in every mode; see ``storm.py``), 48 in flight against a 4 MiB
KV cache, about 40 % of whose clients leave before the first token, mid-decode or at a random
time. Afterwards: every request whose client stayed got its whole answer; the server still
serves; once idle, nothing runs or waits and no KV is held (``vllm:kv_cache_usage_perc`` 0; in
proxima modes also ``proxima:kv_slots_used`` 0 and every slot free or cached).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import ServerPool
from tests.faults.harness import SERVED, metrics, post_json, wait_for
from tests.faults.storm import make_plans, summarize, timed_storm

pytestmark = [pytest.mark.server, pytest.mark.faults]

NUM_REQUESTS = 240
CONCURRENCY = 48
SEED = 20261203
IDLE_TIMEOUT_S = 30.0
KNOWN_STALE_USAGE: set[str] = set()
"""Modes whose ``vllm:kv_cache_usage_perc`` may stay stale while idle (none since the token
layout's fix of docs/faults.md, issue 1)."""


def idle(m: dict[str, float]) -> bool:
    """Nothing running or waiting."""
    return m.get("vllm:num_requests_running", 1) == 0 and m.get("vllm:num_requests_waiting", 1) == 0


def no_kv_held(m: dict[str, float], proxima: bool) -> bool:
    """Idle and no KV held by requests, by every gauge the mode exports."""
    if not idle(m) or m.get("vllm:kv_cache_usage_perc", 1) != 0:
        return False
    return not proxima or slots_balanced(m)


def slots_balanced(m: dict[str, float]) -> bool:
    """``proxima:kv_slots_used`` is 0 and every slot is free or cached (evictable)."""
    used = m.get("proxima:kv_slots_used", -1)
    free, cached = m.get("proxima:kv_slots_free", -1), m.get("proxima:kv_slots_cached", -1)
    return used == 0 and free + cached == m.get("proxima:kv_slots_total")


def gauges(m: dict[str, float]) -> dict[str, float | None]:
    keys = (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "proxima:kv_slots_used",
        "proxima:kv_slots_cached",
        "proxima:kv_slots_free",
        "proxima:kv_slots_total",
    )
    return {k: m.get(k) for k in keys}


@pytest.mark.parametrize("mode", ["off", "paged", "token"])
def test_disconnect_storm_leaves_no_kv_behind(
    servers: ServerPool, mode: str, tmp_path: Path
) -> None:
    server = servers.get(mode)
    proxima = mode != "off"
    plans = make_plans(NUM_REQUESTS, SEED)
    outcomes, seconds = timed_storm(server.base_url, plans, CONCURRENCY)
    summary: dict[str, Any] = {"mode": mode, **summarize(outcomes, seconds)}

    # Idle without help first (what a dashboard shows), then after one more request.
    _, before_probe = wait_for(lambda: metrics(server), lambda m: no_kv_held(m, proxima), 10.0)
    probe = post_json(
        server, "/v1/completions", {"model": SERVED, "prompt": "still there?", "max_tokens": 4}
    )
    reached, after = wait_for(
        lambda: metrics(server), lambda m: no_kv_held(m, proxima), IDLE_TIMEOUT_S
    )
    summary.update(idle_before_probe=gauges(before_probe), idle_after_probe=gauges(after))
    (tmp_path / f"storm-{mode}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))

    kinds = summary["by_kind"]
    for leave in ("prefill", "decode", "timer"):
        assert kinds.get(f"{leave}:left", 0) > 0, f"no client left at {leave}: {kinds}"
    assert not summary["bad"], f"clients that stayed got incomplete answers: {summary['bad']}"
    assert probe["usage"]["completion_tokens"] == 4, "the server stopped serving"
    assert idle(after), f"requests still running or waiting once idle: {gauges(after)}"
    if proxima:
        assert slots_balanced(after), f"KV slots held once idle: {gauges(after)}"
    if not reached and mode in KNOWN_STALE_USAGE:
        pytest.xfail(
            "known issue (docs/faults.md): vllm:kv_cache_usage_perc stale while idle in the "
            f"token layout although no slot is held: {gauges(after)}"
        )
    assert reached, f"KV still held once idle: {gauges(after)}"
