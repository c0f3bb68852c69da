"""Preemption-victim choice: the request whose KV is cheapest to recompute."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.v1.request import Request

PROTECTED_AFTER_PREEMPTIONS = 2
"""A request preempted this often is chosen as victim only as a last resort."""


def cheapest_to_recompute(running: list[Request], req_index: int) -> int:
    """Index in ``running`` of the victim among the requests not yet scheduled this
    step (``req_index`` on): the one with the fewest computed tokens, sparing requests
    already preempted often (no starvation); the newest on a tie. Upstream's choice
    (the last) when at most one candidate is left."""
    candidates = range(req_index, len(running))
    if len(candidates) <= 1:
        return len(running) - 1

    def cost(i: int) -> tuple[int, int, int]:
        r = running[i]
        protected = int(r.num_preemptions >= PROTECTED_AFTER_PREEMPTIONS)
        return (protected, r.num_computed_tokens, -i)

    return min(candidates, key=cost)
