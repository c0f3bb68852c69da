"""End to end on CPU: token-level prefix sharing gives stock's greedy tokens and
caches at least as many prompt tokens as stock's block-level prefix caching.

Stock here is vLLM with prefix caching on (its default) over 128-token CPU blocks;
proxima shares exactly the common tokens, at any length.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.utils import VOCAB, engine_kwargs, mode, run_engine, tokens

pytestmark = pytest.mark.engine

BASE = engine_kwargs(max_num_batched_tokens=256)


def shared_system_prompts(seed: int = 5) -> list[dict]:
    rng = np.random.default_rng(seed)
    systems = [rng.integers(7, VOCAB, size=n).tolist() for n in (37, 53, 70, 101)]
    reqs = []
    for i in range(24):
        user = rng.integers(7, VOCAB, size=int(rng.integers(5, 40))).tolist()
        reqs.append({"prompt_token_ids": systems[i % 4] + user, "max_tokens": 12})
    return reqs


def test_shared_system_prompts_same_tokens_more_sharing() -> None:
    load = shared_system_prompts()
    stock = run_engine(mode(BASE, "off"), load)
    prox = run_engine(mode(BASE, "on", debug_invariants=True, kv_layout="token"), load)
    assert tokens(prox) == tokens(stock)
    assert prox["prefix_cache"] is not None and prox["prefix_cache"]["hits"] > 0
    # Exact sharing: every request after the first of its system prompt reuses at
    # least the system prompt; stock's 128-token blocks can share none of these.
    assert prox["cached_tokens_total"] >= stock["cached_tokens_total"]
    assert prox["cached_tokens_total"] >= sum((37, 53, 70, 101)) * 5
    pool = prox["pool"]
    assert pool["num_free"] == pool["num_usable"]  # after the cache is reset


def test_multi_turn_chat_reuses_history() -> None:
    rng = np.random.default_rng(9)
    first = [
        {"prompt_token_ids": rng.integers(7, VOCAB, size=int(n)).tolist(), "max_tokens": 10}
        for n in rng.integers(20, 60, size=6)
    ]
    followups = []
    for conv in range(6):  # turn 2 follows turn 1, turn 3 follows turn 2
        suffix = rng.integers(7, VOCAB, size=int(rng.integers(5, 15))).tolist()
        followups.append({"parent": conv, "suffix": suffix, "max_tokens": 8})
    for conv in range(6):
        suffix = rng.integers(7, VOCAB, size=int(rng.integers(5, 15))).tolist()
        followups.append({"parent": f"f{conv}", "suffix": suffix, "max_tokens": 8})
    stock = run_engine(mode(BASE, "off"), first, followups=followups)
    prox = run_engine(
        mode(BASE, "on", debug_invariants=True, kv_layout="token"), first, followups=followups
    )
    assert len(prox["outputs"]) == 18
    assert tokens(prox) == tokens(stock)
    # Turn 2 and 3 find the whole history but the last token.
    later = [o["num_cached_tokens"] for rid, o in prox["outputs"].items() if rid.startswith("f")]
    assert min(later) > 0
    assert prox["cached_tokens_total"] > stock["cached_tokens_total"]


def test_aborts_mid_prefill_with_sharing_leak_nothing() -> None:
    load = shared_system_prompts(seed=6)
    aborts = {str(i): 1 + i % 3 for i in range(0, 24, 2)}
    small_steps = engine_kwargs(max_num_batched_tokens=64)
    stock = run_engine(mode(small_steps, "off"), load)
    prox = run_engine(
        mode(small_steps, "on", debug_invariants=True, kv_layout="token"),
        load,
        abort_after_steps=aborts,
    )
    expected = tokens(stock)
    for rid, out in prox["outputs"].items():
        if out["finish_reason"] != "aborted":
            assert out["token_ids"] == expected[rid]
    pool = prox["pool"]
    assert pool["num_free"] == pool["num_usable"]
    assert pool["requests_holding_slots"] == 0
