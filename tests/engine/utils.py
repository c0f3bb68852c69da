"""Helpers for engine tests: run vLLM's engine on the tiny model in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "tiny-llama"
RUNNER = Path(__file__).with_name("run_engine.py")
VOCAB = 1024


def engine_kwargs(**overrides: Any) -> dict[str, Any]:
    """EngineArgs for the tiny model: eager, float32, explicit KV bytes."""
    kw: dict[str, Any] = {
        "model": str(MODEL),
        "enforce_eager": True,
        "dtype": "float32",
        "max_model_len": 1024,
        "kv_cache_memory_bytes": 8 << 20,
        "max_num_seqs": 64,
        "seed": 0,
    }
    kw.update(overrides)
    return kw


def mode(kwargs: dict[str, Any], proxima: str, **options: Any) -> dict[str, Any]:
    """The same engine kwargs with proxima on or off (and options)."""
    out = dict(kwargs)
    out["additional_config"] = {"proxima": {"mode": proxima, **options}}
    return out


def prompts(
    n: int, lo: int, hi: int, seed: int, max_tokens: tuple[int, int] = (8, 48)
) -> list[dict[str, Any]]:
    """Token-id prompts of lengths U[lo, hi] with greedy output lengths U[max_tokens]."""
    rng = np.random.default_rng(seed)
    return [
        {
            "prompt_token_ids": rng.integers(7, VOCAB, size=int(rng.integers(lo, hi + 1))).tolist(),
            "max_tokens": int(rng.integers(max_tokens[0], max_tokens[1] + 1)),
        }
        for _ in range(n)
    ]


def run_engine(
    engine: dict[str, Any],
    requests: list[dict[str, Any]],
    env_extra: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Run the engine once in a subprocess (see run_engine.py); returns its JSON."""
    env = {**os.environ, **(env_extra or {})}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp, "spec.json")
        out = Path(tmp, "out.json")
        spec.write_text(json.dumps({"engine": engine, "requests": requests, **extra}))
        proc = subprocess.run(
            [sys.executable, str(RUNNER), str(spec), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0 or not out.exists():
            raise AssertionError(
                f"engine run failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
            )
        return json.loads(out.read_text())


def tokens(result: dict[str, Any]) -> dict[str, list[int] | None]:
    return {k: v["token_ids"] for k, v in result["outputs"].items()}
