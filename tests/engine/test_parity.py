"""End to end on CPU: proxima mode gives stock vLLM's greedy tokens.

Stock (``--proxima off``: CPU_ATTN, 128-token blocks, upstream's KV manager)
and proxima in both KV layouts (paged: upstream's manager and kernels with
projected-peak admission; token: torch attention over 1-token slots, the slot
pool) run the same token-id prompts in separate processes.
"""

from __future__ import annotations

import pytest

from tests.engine.utils import engine_kwargs, mode, prompts, run_engine, tokens

pytestmark = pytest.mark.engine

# Mixed lengths, some longer than the 96-token step budget: chunked prefill.
MIXED = prompts(24, 1, 300, seed=1)
BASE = engine_kwargs(max_num_batched_tokens=96)


@pytest.fixture(scope="module")
def stock() -> dict:
    return run_engine(mode(BASE, "off"), MIXED)


@pytest.fixture(scope="module", params=["paged", "token"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def proxima(layout: str) -> dict:
    return run_engine(mode(BASE, "on", debug_invariants=True, kv_layout=layout), MIXED)


def test_modes_are_what_they_say(stock: dict, proxima: dict, layout: str) -> None:
    assert stock["scheduler_cls"] == "Scheduler" and stock["block_size"] != 1
    assert proxima["scheduler_cls"] == "ProximaScheduler"
    assert (proxima["block_size"] == 1) == (layout == "token")
    if layout == "paged":  # vLLM's own pages: the same block size as stock
        assert proxima["block_size"] == stock["block_size"]


def test_greedy_tokens_identical_with_chunked_prefill(stock: dict, proxima: dict) -> None:
    assert len(proxima["outputs"]) == len(MIXED)
    assert tokens(proxima) == tokens(stock)
    for i, req in enumerate(MIXED):
        assert len(proxima["outputs"][str(i)]["token_ids"]) == req["max_tokens"]


def test_every_slot_returns_to_the_pool(proxima: dict) -> None:
    pool = proxima["pool"]
    assert pool["num_free"] == pool["num_usable"]
    assert pool["requests_holding_slots"] == 0


def test_aborts_mid_prefill_and_mid_decode_leak_nothing(stock: dict, layout: str) -> None:
    # Abort every third request: early ones while their prompt is still being
    # chunked in, later ones mid-decode. The rest must still match stock.
    aborts = {str(i): 1 + (i % 9) for i in range(0, len(MIXED), 3)}
    result = run_engine(
        mode(BASE, "on", debug_invariants=True, kv_layout=layout),
        MIXED,
        abort_after_steps=aborts,
    )
    pool = result["pool"]
    assert pool["num_free"] == pool["num_usable"], "slots leaked after aborts"
    assert pool["requests_holding_slots"] == 0
    expected = tokens(stock)
    for rid, out in result["outputs"].items():
        if rid in aborts and out["finish_reason"] == "aborted":
            continue
        assert out["token_ids"] == expected[rid]
    assert sum(out["finish_reason"] == "aborted" for out in result["outputs"].values()) >= 5


def test_pressure_fewer_preemptions_same_tokens(layout: str) -> None:
    # A KV pool of ~1,000 tokens for 20 requests of up to ~260 tokens each.
    load = prompts(20, 40, 160, seed=2, max_tokens=(40, 100))
    # max_model_len 512 (requests need ~260): from vLLM 0.32 the pool must hold one request
    # of max_model_len, and 1 MiB is just under the default 1,024 tokens' worth.
    tight = engine_kwargs(
        kv_cache_memory_bytes=1 << 20, max_num_batched_tokens=256, max_model_len=512
    )
    stock = run_engine(mode(tight, "off"), load)
    prox = run_engine(mode(tight, "on", admission="adaptive", kv_layout=layout), load)
    assert stock["preemptions"] > 0
    assert prox["preemptions"] < stock["preemptions"]
    assert not prox["unfinished"] and len(prox["outputs"]) == len(load)
    assert tokens(prox) == tokens(stock)
    assert prox["pool"]["num_free"] == prox["pool"]["num_usable"]
