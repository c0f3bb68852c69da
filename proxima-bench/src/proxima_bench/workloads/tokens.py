"""Token-id workloads shared by the engine A/B (GPU) and the scheduler simulator (CPU).

Lengths are exact (token ids, no tokenizer) and come from the one length model,
:mod:`proxima_bench.workloads.lengths`: the ranges are its workloads' (``Baseline``,
``SharedSystem``, ``Chat``) and every uniform draw goes through ``draw_uniform``.
The draws are in a fixed order from one seeded generator, so a seed gives the
same requests every time (and the same as before the benches shared the model).
"""

from __future__ import annotations

import numpy as np

from proxima_bench.workloads.lengths import Baseline, Chat, SharedSystem, draw_uniform

# Issue 8's (b) chats in token ids: 5 turns, no system part (the first turn is a
# user message), user messages and outputs as the serving ``chat`` workload's.
TOKEN_CHAT = Chat(turns=5)
# Issue 8's (a): the serving ``shared-system`` workload's lengths.
SYSPROMPT = SharedSystem()


def sysprompt_workload(
    n: int, seed: int, vocab: int = 32000, shape: SharedSystem = SYSPROMPT
) -> tuple[list[list[int]], list[int]]:
    """Issue 8's (a), ``shape``'s lengths (default: 8 system prompts of U[200,1000]
    tokens, user part U[20,200], output U[32,256]); requests cycle through the
    system prompts in random order."""
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(3, vocab, size=int(k)).tolist()
        for k in draw_uniform(rng, shape.system, shape.num_systems)
    ]
    which = rng.integers(0, shape.num_systems, size=n)
    users = draw_uniform(rng, shape.user, n)
    olens = draw_uniform(rng, shape.output, n)
    prompts = [
        systems[int(w)] + rng.integers(3, vocab, size=int(u)).tolist()
        for w, u in zip(which, users, strict=True)
    ]
    return prompts, [int(x) for x in olens]


def chat_workload(
    conversations: int, seed: int, turns: int = TOKEN_CHAT.turns, vocab: int = 32000
) -> tuple[list[list[int] | None], list[int], dict[int, tuple[int, list[int]]]]:
    """Issue 8's (b): ``conversations`` chats of ``turns`` turns.

    Returns first-turn prompts (later turns ``None``: made when their previous turn
    finishes), output lengths (``TOKEN_CHAT.output``, U[32,256]), and ``{turn
    index: (next turn index, the next user message)}``. User messages are
    ``TOKEN_CHAT.user`` (U[20,100]) tokens.
    """
    rng = np.random.default_rng(seed)
    n = conversations * turns
    prompts: list[list[int] | None] = [None] * n
    chain: dict[int, tuple[int, list[int]]] = {}
    olens = [int(x) for x in draw_uniform(rng, TOKEN_CHAT.output, n)]
    lo, hi = TOKEN_CHAT.user
    for c in range(conversations):
        first = c * turns
        prompts[first] = rng.integers(3, vocab, size=int(rng.integers(lo, hi + 1))).tolist()
        for t in range(turns - 1):
            message = rng.integers(3, vocab, size=int(rng.integers(lo, hi + 1))).tolist()
            chain[first + t] = (first + t + 1, message)
    return prompts, olens, chain


def workload(
    n: int,
    seed: int,
    prompt: tuple[int, int] = Baseline.prompt,
    output: tuple[int, int] = Baseline.output,
    vocab: int = 32000,
) -> tuple[list[list[int]], list[int]]:
    """The brief's baseline: prompts of U[prompt] token ids, output lengths U[output]."""
    rng = np.random.default_rng(seed)
    plens = draw_uniform(rng, prompt, n)
    olens = draw_uniform(rng, output, n)
    prompts = [rng.integers(3, vocab, size=int(k)).tolist() for k in plens]
    return prompts, [int(x) for x in olens]
