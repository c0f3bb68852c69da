"""Token-id workloads shared by the engine A/B (GPU) and the scheduler simulator (CPU).

Lengths are exact (token ids, no tokenizer); every generator is seeded.
"""

from __future__ import annotations

import numpy as np


def sysprompt_workload(n: int, seed: int, vocab: int = 32000) -> tuple[list[list[int]], list[int]]:
    """Issue 8's (a): 8 system prompts of U[200,1000] tokens, user part U[20,200],
    output U[32,256]; requests cycle through the system prompts in random order."""
    rng = np.random.default_rng(seed)
    systems = [
        rng.integers(3, vocab, size=int(k)).tolist() for k in rng.integers(200, 1001, size=8)
    ]
    which = rng.integers(0, 8, size=n)
    users = rng.integers(20, 201, size=n)
    olens = rng.integers(32, 257, size=n)
    prompts = [
        systems[int(w)] + rng.integers(3, vocab, size=int(u)).tolist()
        for w, u in zip(which, users, strict=True)
    ]
    return prompts, [int(x) for x in olens]


def chat_workload(
    conversations: int, seed: int, turns: int = 5, vocab: int = 32000
) -> tuple[list[list[int] | None], list[int], dict[int, tuple[int, list[int]]]]:
    """Issue 8's (b): ``conversations`` chats of ``turns`` turns.

    Returns first-turn prompts (later turns ``None``: made when their previous turn
    finishes), output lengths U[32,256], and ``{turn index: (next turn index, the
    next user message)}``. User messages are U[20,100] tokens.
    """
    rng = np.random.default_rng(seed)
    n = conversations * turns
    prompts: list[list[int] | None] = [None] * n
    chain: dict[int, tuple[int, list[int]]] = {}
    olens = [int(x) for x in rng.integers(32, 257, size=n)]
    for c in range(conversations):
        first = c * turns
        prompts[first] = rng.integers(3, vocab, size=int(rng.integers(20, 101))).tolist()
        for t in range(turns - 1):
            message = rng.integers(3, vocab, size=int(rng.integers(20, 101))).tolist()
            chain[first + t] = (first + t + 1, message)
    return prompts, olens, chain


def workload(
    n: int,
    seed: int,
    prompt: tuple[int, int] = (50, 200),
    output: tuple[int, int] = (32, 256),
    vocab: int = 32000,
) -> tuple[list[list[int]], list[int]]:
    """The brief's baseline: prompts of U[prompt] token ids, output lengths U[output]."""
    rng = np.random.default_rng(seed)
    plens = rng.integers(prompt[0], prompt[1] + 1, size=n)
    olens = rng.integers(output[0], output[1] + 1, size=n)
    prompts = [rng.integers(3, vocab, size=int(k)).tolist() for k in plens]
    return prompts, [int(x) for x in olens]
