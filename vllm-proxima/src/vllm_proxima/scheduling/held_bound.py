"""An upper bound of any projected peak, from the pages held now: admission's second
fast path.

Resident ``i`` will hold at most ``w_i`` pages (its ``max_tokens`` pages, lookahead
included) and holds ``h_i`` now, so it adds at most ``max(w_i - h_i, 0)``. The pool's
held pages plus those additions bound every peak the projection can find, because the
projection counts each resident at most at ``w_i`` and the pages held in common once.
That bound is the plain sum of the ``w_i`` (the first fast path) less the residents'
references to pages another resident holds too: with shared system prompts it admits where
the sum fails, and the residents need not be read (91 to 8 us of admission a step at 64
residents in the simulator). It applies to one full-attention group with prefix caching on
(the paged layout); without sharing it is never below the sum.

It admits only with an eighth of the pool to spare (``HEADROOM_PART``): where the pool is
tight the projection decides. The bound is a pass over the residents' page lists; where the
held pages alone are over the limit it cannot fit, and the pass is skipped (in a burst or a
tight pool the pass then runs a few times a run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.residency import ResidencyView

HEADROOM_PART = 8
"""The bound admits only with ``1/HEADROOM_PART`` of the pool to spare. Nearer the capacity
the projection decides, with its bookkeeping for the rest of the step, so tight pools
schedule as before (in the simulator's tight shared-prompt pools, without the headroom 10
of 16 runs parted from the projection's schedule, -2.1 to +2.1 % in steps; with it 4,
-2.0 to +0.3 %, -0.18 % in all)."""


def held_bound(view: ResidencyView, worst: Mapping[str, int], running: list[Request]) -> int | None:
    """Pages held now plus what each of ``running`` may still add, given each one's most
    pages in ``worst``; ``None`` where it does not apply (pages not shared, or a resident
    whose most is not known)."""
    if not view.shares_held_pages or len(running) > len(worst):
        return None
    ids = [r.request_id for r in running]
    grow = 0
    for rid, have in zip(ids, view.pages_of(ids), strict=True):
        most = worst.get(rid)
        if most is None:  # not admitted by this policy
            return None
        if most > have:
            grow += most - have
    return view.held_pages() + grow


class HeldBound:
    """The second fast path, with what it last found (for the projected-peak gauge).

    Args:
        view: the KV cache as admission reads it.
    """

    def __init__(self, view: ResidencyView) -> None:
        self.view = view
        self.passes = 0  # times the bound was worked out
        self.last = 0  # the last bound worked out, the candidate's new pages included

    def fits(
        self, worst: Mapping[str, int], running: list[Request], new_pages: int, capacity: int
    ) -> bool:
        """Whether the residents' bound plus ``new_pages`` fits ``capacity`` with the
        headroom to spare."""
        limit = capacity - capacity // HEADROOM_PART - new_pages
        if self.view.held_pages() > limit:  # the residents add nothing: still over
            return False
        bound = held_bound(self.view, worst, running)
        if bound is None:
            return False
        self.passes += 1
        self.last = bound + new_pages
        return bound <= limit
