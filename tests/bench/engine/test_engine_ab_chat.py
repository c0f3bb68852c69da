"""The engine A/B's prefix-caching runs on CPU (proxima_bench.engine.ab).

The H200 proof of issue 8 runs these: ``chat`` (multi-turn: each turn's prompt is the
previous prompt, its answer and a new message) and per-policy eviction (``--evict``).
Here, on the tiny model, the runs must chain turns the same way for stock and proxima,
count cached and computed prompt tokens, and proxima must recompute no more than stock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine.utils import MODEL

pytestmark = pytest.mark.engine

COMMON = [
    "--model", str(MODEL), "--vocab", "1000", "--num-requests", "10",
    "--max-model-len", "2048", "--kv-bytes", str(8 << 20), "--max-num-seqs", "64",
    "--enforce-eager", "--prefix-caching", "--runs", "chat",
]  # fmt: skip


def engine_ab(out: Path, *args: str) -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TORCH_COMPILE_DISABLE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxima_bench.engine.ab",
            *COMMON,
            *args,
            "--out-dir",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("eab")
    engine_ab(out, "--engine", "stock-fa3")
    rows = engine_ab(out, "--engine", "proxima", "--evict", "lru,arc")
    return {f"{r['engine']}:{r['run']}": r for r in rows}


def test_chat_turns_chain_identically(results: dict[str, dict]) -> None:
    stock = results["stock-fa3:chat"]
    assert set(results) == {
        "stock-fa3:chat",
        "proxima:chat-adaptive-lru",
        "proxima:chat-adaptive-arc",
    }
    for r in results.values():
        assert r["status"] == "ok" and r["finished"] == r["requests"] == 10
        # Turns 2-5 carry the whole history: the same prompt tokens on both engines
        # (greedy, the same dummy weights), far more than five first messages.
        assert r["prompt_tokens"] == stock["prompt_tokens"] > 10 * 100
        assert r["prompt_tokens_cached"] + r["prompt_tokens_computed"] == r["prompt_tokens"]


def test_proxima_recomputes_no_more_than_stock(results: dict[str, dict]) -> None:
    stock = results["stock-fa3:chat"]
    assert stock["prompt_tokens_cached"] > 0  # stock shares whole blocks (128 on CPU)
    for policy in ("lru", "arc"):
        r = results[f"proxima:chat-adaptive-{policy}"]
        assert r["evict_policy"] == policy and r["prefix_evicted_slots"] == 0  # ample KV
        assert r["prompt_tokens_computed"] <= stock["prompt_tokens_computed"]
