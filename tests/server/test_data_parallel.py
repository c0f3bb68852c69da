"""Data parallel on CPU: ``vllm serve --data-parallel-size 2`` with proxima on and off.

vLLM's own data-parallel machinery (two engine cores, its DP coordinator and load
balancer) carries the requests; each engine core has its own proxima scheduler and slot
pool. Greedy completions must equal ``--proxima off``'s, and both engines must serve.
"""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.server.test_server import CPU_FLAGS, MODEL, SERVED, Server

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="tiny model missing"),
]

PROMPTS = [f"Request {i}: the {w} of the matter is" for i, w in enumerate("abcdefghijkl")]


def serve_dp2(tmp_path: Path, proxima: str) -> dict:
    log = tmp_path / f"dp2-{proxima}.log"
    server = Server(
        [
            str(Path(sys.executable).with_name("vllm")),
            "serve",
            str(MODEL),
            *CPU_FLAGS,
            "--data-parallel-size",
            "2",
            "--proxima",
            proxima,
        ],
        log,
    )
    try:
        server.wait(timeout=300)

        def complete(prompt: str) -> tuple[str, int]:
            body = {"model": SERVED, "prompt": prompt, "max_tokens": 16, "temperature": 0}
            reply = json.loads(server.post("/v1/completions", body))
            return reply["choices"][0]["text"], reply["usage"]["prompt_tokens"]

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            texts, prompt_tokens = zip(*pool.map(complete, PROMPTS), strict=True)
        metrics = server.get("/metrics").decode()
    finally:
        server.stop()
    return {
        "texts": list(texts),
        "prompt_tokens": sum(prompt_tokens),
        "metrics": metrics,
        "log": log.read_text(errors="replace"),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("dp")
    return {m: serve_dp2(tmp, m) for m in ("off", "on")}


def test_completions_identical_to_proxima_off(runs: dict[str, dict]) -> None:
    assert all(runs["on"]["texts"]), "empty completion"
    assert runs["on"]["texts"] == runs["off"]["texts"]


def test_each_engine_has_its_own_pool_and_both_serve(runs: dict[str, dict]) -> None:
    on = runs["on"]
    assert "proxima on" in on["log"]
    assert "--proxima off" not in on["log"]
    # Both engine cores served (vLLM's DP load balancer spread the requests), and
    # each was counted once although two API servers export the metrics.
    served = series(on["metrics"], "vllm:request_success_total")
    assert set(served) == {"0", "1"} and all(v > 0 for v in served.values()), served
    assert sum(served.values()) == len(PROMPTS)
    # One pool per engine core, one series per engine (no per-process duplicates).
    slots = series(on["metrics"], "proxima:kv_slots_total", unique=True)
    assert set(slots) == {"0", "1"} and len(set(slots.values())) == 1 and slots["0"] > 0
    # Every prompt was looked up once, when admitted: in the paged layout (the default) the
    # prefix cache is vLLM's and so is the count (whole prompts, in tokens).
    queried = series(on["metrics"], "vllm:prefix_cache_queries_total")
    assert sum(queried.values()) == on["prompt_tokens"], queried


def series(metrics: str, name: str, unique: bool = False) -> dict[str, float]:
    """``{engine: value}`` of one metric, summed over its other labels; ``unique``:
    fail on two series for one engine."""
    found: dict[str, float] = {}
    pattern = re.escape(name) + r"\{([^}]*)\} (\S+)$"
    for m in re.finditer(pattern, metrics, re.M):
        engine = re.search(r'engine="(\d+)"', m.group(1))
        assert engine is not None, m.group(0)
        key = engine.group(1)
        assert not (unique and key in found), f"two series for engine {key}: {name}"
        found[key] = found.get(key, 0.0) + float(m.group(2))
    return found
