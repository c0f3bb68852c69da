"""An upper bound of any projected peak, from the pages held now: admission's second
fast path.

Resident ``i`` will hold at most ``w_i`` pages (its ``max_tokens`` pages, lookahead
included) and holds ``h_i`` now, so it adds at most ``max(w_i - h_i, 0)``. The pool's
held pages plus those additions bound every peak the projection can find, because the
projection counts each resident at most at ``w_i`` and the pages held in common once.
That bound is the plain sum of the ``w_i`` (the first fast path) less ``D``, the
residents' references to pages another resident holds too: with shared system prompts it
admits where the sum fails, and the residents need not be read (about 0.07 ms a step at
64 residents in the simulator). It applies to one full-attention group with prefix
caching on (the paged layout); without sharing ``D`` is 0.

It admits only with an eighth of the pool to spare (``HEADROOM_PART``): where the pool is
tight the projection decides. Working it out is a pass over the residents, wasted where
``D`` is too small (a burst of unrelated prompts, ~5 % more admission CPU in the
simulator): :class:`HeldBound` remembers the last ``D`` and skips the pass while the sum's
excess is well above it, trying again every ``RETRY_EVERY``-th time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.residency import ResidencyView

RETRY_EVERY = 16
"""Skipped passes before the bound is worked out again whatever the last ``D``."""
SLACK_PAGES = 8
"""Excess over twice the last ``D`` still worth a pass (``D`` moves as residents come and go)."""
HEADROOM_PART = 8
"""The bound admits only with ``1/HEADROOM_PART`` of the pool to spare. Nearer the capacity
the projection decides, with its bookkeeping for the rest of the step, so tight pools
schedule as before (in the simulator's tight shared-prompt pools, without the headroom 10
of 16 runs parted from the projection's schedule, -2.1 to +2.1 % in steps; with it 3,
-0.6 to +0.3 %)."""


def held_bound(
    view: ResidencyView, worst: Mapping[str, int], running: list[Request]
) -> tuple[int, int] | None:
    """``(bound, D)``: pages held now plus what each of ``running`` may still add, given
    each one's most pages in ``worst``, and the references to pages held in common it
    saves over the sum of ``worst``. ``None`` where it does not apply (pages not shared,
    or a resident whose most is not known)."""
    if not view.shares_held_pages or len(running) > len(worst):
        return None
    ids = [r.request_id for r in running]
    most_sum = have_sum = 0
    for rid, have in zip(ids, view.pages_of(ids), strict=True):
        most = worst.get(rid)
        if most is None:  # not admitted by this policy
            return None
        most_sum += most
        have_sum += most if have > most else have
    held = view.held_pages()
    return held + most_sum - have_sum, max(have_sum - held, 0)


class HeldBound:
    """The second fast path with its skip rule.

    Args:
        view: the KV cache as admission reads it.
    """

    def __init__(self, view: ResidencyView) -> None:
        self.view = view
        self.shared: int | None = None  # the last D (None: never worked out)
        self.skipped = 0
        self.passes = 0  # times the bound was worked out
        self.last = 0  # the last bound worked out, the candidate's new pages included

    def fits(
        self,
        worst: Mapping[str, int],
        excess: int,
        running: list[Request],
        new_pages: int,
        capacity: int,
    ) -> bool:
        """Whether the residents' bound plus ``new_pages`` fits ``capacity`` with the
        headroom to spare;
        ``excess``: by how much the sum of ``max_tokens`` pages, the candidate's
        included, is over the capacity."""
        limit = capacity - capacity // HEADROOM_PART - new_pages
        if self.view.held_pages() > limit:  # the residents add nothing: still over
            return False
        last = self.shared
        if last is not None and excess > 2 * last + SLACK_PAGES and self.skipped < RETRY_EVERY:
            self.skipped += 1
            return False
        self.skipped = 0
        found = held_bound(self.view, worst, running)
        if found is None:
            return False
        bound, self.shared = found
        self.passes += 1
        self.last = bound + new_pages
        return bound <= limit
