"""Speculative decoding (n-gram) with proxima on: the paged layout runs vLLM's own draft
slots, and its projected peak counts the lookahead; greedy tokens are stock's.

Prompts repeat a short random sequence a few times, so the n-gram proposer finds matches and
drafts are verified in most steps. (The tiny model's random weights rarely accept them, so this
shows correctness, not speed.)
"""

from __future__ import annotations

import random

import pytest

from tests.engine.utils import engine_kwargs, mode, run_engine, tokens

pytestmark = pytest.mark.engine

NGRAM = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
}


def repetitive_prompts(n: int = 16, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        base = [rng.randrange(3, 1000) for _ in range(rng.randint(5, 20))]
        out.append(
            {
                "prompt_token_ids": base * rng.randint(2, 6),
                "max_tokens": rng.randint(24, 64),
                "ignore_eos": True,
            }
        )
    return out


PROMPTS = repetitive_prompts()


@pytest.fixture(scope="module")
def stock_spec() -> dict:
    return run_engine(mode(engine_kwargs(speculative_config=NGRAM), "off"), PROMPTS)


@pytest.fixture(scope="module")
def proxima_spec() -> dict:
    return run_engine(mode(engine_kwargs(speculative_config=NGRAM), "on"), PROMPTS)


@pytest.fixture(scope="module")
def proxima_plain() -> dict:
    return run_engine(mode(engine_kwargs(), "on"), PROMPTS)


def test_ngram_with_proxima_on_gives_stocks_greedy_tokens(
    stock_spec: dict, proxima_spec: dict
) -> None:
    assert proxima_spec["scheduler_cls"] == "ProximaScheduler"
    assert stock_spec["scheduler_cls"] == "Scheduler"
    assert tokens(proxima_spec) == tokens(stock_spec)
    assert not proxima_spec["unfinished"]


def test_drafts_were_scheduled_and_projected(proxima_spec: dict, proxima_plain: dict) -> None:
    # Drafts were verified in many steps; rejected ones gave their slots back (same tokens as
    # without speculation, nothing left held).
    assert proxima_spec["draft_tokens_scheduled"] > 100
    assert proxima_plain["draft_tokens_scheduled"] == 0
    assert tokens(proxima_spec) == tokens(proxima_plain)
    # n-gram drafts are scheduled as the step's new tokens (vLLM reserves no lookahead slots
    # for them: num_lookahead_tokens 0), and in a request's last steps past its max_tokens:
    # the projection counts the lookahead and the drafts.
    assert proxima_spec["num_lookahead_tokens"] == 0
    assert proxima_spec["projected_lookahead"] == NGRAM["num_speculative_tokens"]
    assert proxima_plain["projected_lookahead"] == 0


def test_drafts_past_max_tokens_are_counted(proxima_spec: dict, proxima_plain: dict) -> None:
    """A request's last steps may schedule drafts past its max_tokens (vLLM does not trim
    them), so it can hold slots beyond its final size; the projection's final size counts one
    step's drafts. Checked every step: no running request holds more pages than that. (The
    check that fails without the drafts counted is the test above: these prompts never ran
    past a page boundary.)"""
    assert proxima_spec["final_overrun_pages"] is not None
    assert proxima_spec["final_overrun_pages"] <= 0
    assert proxima_plain["final_overrun_pages"] <= 0


def test_no_kv_left_held(proxima_spec: dict) -> None:
    assert proxima_spec["pool"]["requests_holding_slots"] == 0


def test_auto_leaves_speculative_decoding_to_stock(stock_spec: dict) -> None:
    """``--proxima auto`` (the default) runs vLLM's own scheduler with a speculative config:
    n-gram bursts measured no faster than stock on the H200 and an H100; ``on`` still runs it
    (the tests above)."""
    run = run_engine(mode(engine_kwargs(speculative_config=NGRAM), "auto"), PROMPTS[:4])
    assert run["scheduler_cls"] == "Scheduler"
    assert run["projection"] is None
    assert not run["unfinished"]
    ours, theirs = tokens(run), tokens(stock_spec)
    assert len(ours) == 4 and ours == {k: theirs[k] for k in ours}
