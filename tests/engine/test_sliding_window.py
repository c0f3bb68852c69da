"""Sliding-window models with proxima on: a Gemma-2/3-like alternating layout (sliding, full)
and a Mistral-like all-sliding one, made from the tiny Llama by its config alone (vLLM's Llama
reads ``layer_types`` and ``sliding_window``; the weights are the same).

What proxima does for them (paged layout): its projection models each KV cache group, full
groups a page per 16 tokens, sliding groups at their window's bound (kv/paged.py, scheduling/
windows.py), over vLLM's own hybrid KV cache manager, block pool and kernels. The engine starts
where stock starts, runs the projected-peak admission, and gives stock's greedy tokens.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.engine.utils import MODEL, engine_kwargs, mode, prompts, run_engine, tokens

pytestmark = pytest.mark.engine

WINDOW = 64
LAYOUTS = {
    "alternating": ["sliding_attention", "full_attention"],
    "all-sliding": ["sliding_attention", "sliding_attention"],
}


def sliding_model(dest: Path, layer_types: list[str]) -> Path:
    shutil.copytree(MODEL, dest)
    config = json.loads((dest / "config.json").read_text())
    config.update(sliding_window=WINDOW, layer_types=layer_types)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return dest


def long_prompts(n: int = 12, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "prompt_token_ids": [rng.randrange(3, 1000) for _ in range(rng.randint(50, 300))],
            "max_tokens": rng.randint(16, 80),
            "ignore_eos": True,
        }
        for _ in range(n)
    ]


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    model = sliding_model(tmp_path_factory.mktemp("sw") / request.param, LAYOUTS[request.param])
    prompts = long_prompts()  # longer than the window: blocks leave it
    kwargs = engine_kwargs(model=str(model))
    return {
        "layout": request.param,
        "off": run_engine(mode(kwargs, "off"), prompts),
        "on": run_engine(mode(kwargs, "on"), prompts),
    }


def test_the_kv_cache_has_sliding_window_groups(runs: dict) -> None:
    specs = runs["on"]["kv_cache_specs"]
    assert "SlidingWindowSpec" in specs
    assert ("FullAttentionSpec" in specs) == (runs["layout"] == "alternating")
    assert specs == runs["off"]["kv_cache_specs"]


def test_proxima_on_starts_and_gives_stocks_greedy_tokens(runs: dict) -> None:
    assert runs["on"]["scheduler_cls"] == "ProximaScheduler"
    assert runs["off"]["scheduler_cls"] == "Scheduler"
    assert tokens(runs["on"]) == tokens(runs["off"])
    assert not runs["on"]["unfinished"]
    assert runs["on"]["pool"]["requests_holding_slots"] == 0


def test_the_projection_runs_for_these_shapes(runs: dict) -> None:
    assert runs["on"]["projection"] is True
    assert runs["off"]["projection"] is None
    assert runs["on"]["preemptions"] <= runs["off"]["preemptions"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_pressure_no_preemptions_same_tokens(layout: str, tmp_path: Path) -> None:
    # test_parity's pressure load: a KV pool of ~1,000 tokens for 20 requests of up to ~260.
    model = sliding_model(tmp_path / layout, LAYOUTS[layout])
    load = prompts(20, 40, 160, seed=2, max_tokens=(40, 100))
    tight = engine_kwargs(
        model=str(model), kv_cache_memory_bytes=1 << 20, max_num_batched_tokens=256
    )
    stock = run_engine(mode(tight, "off"), load)
    prox = run_engine(mode(tight, "on", admission="adaptive"), load)
    assert prox["projection"] is True
    assert stock["preemptions"] > 0
    assert prox["preemptions"] < stock["preemptions"]
    assert not prox["unfinished"] and len(prox["outputs"]) == len(load)
    assert tokens(prox) == tokens(stock)


def test_auto_leaves_sliding_window_models_to_stock(tmp_path: Path) -> None:
    """``--proxima auto`` (the default) runs vLLM's own scheduler for a sliding-window model:
    on the H200's burst proxima measured slower than stock there; ``on`` still runs it."""
    model = sliding_model(tmp_path / "alternating", LAYOUTS["alternating"])
    run = run_engine(mode(engine_kwargs(model=str(model)), "auto"), long_prompts(n=2))
    assert run["scheduler_cls"] == "Scheduler"
    assert run["projection"] is None
    assert not run["unfinished"]
