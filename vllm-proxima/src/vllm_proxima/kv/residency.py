"""What the admission policy reads of the KV cache: a residency view.

Admission needs, for the resident (running) requests, how many tokens each will
hold *alone* (they free when it finishes) and how many pages two or more hold
(a shared prefix, freed only when its last holder goes); and, for a waiting
request's prefix-cache hit, which of the hit's pages residents hold already.
Two layouts answer that:

- :class:`~vllm_proxima.kv.paged.PagedResidency`: upstream's block pool (pages of
  the attention backend's block size; vLLM's own prefix caching);
- :class:`TokenResidency`: proxima's global pool of 1-token slots, read from the
  residency index the token layout's KV manager feeds with events
  (:class:`~vllm_proxima.kv.token_residency.TokenResidencyIndex`).

Both speak in **tokens** for what grows and in **pages** for what is shared, so the
policy projects every layout with one formula
(:func:`vllm_proxima.scheduling.projection.projected_peak`); a token layout is
the page size 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.manager import ProximaKVCacheManager
    from vllm_proxima.kv.token_residency import TokenResidencyIndex


class KVShape(NamedTuple):
    """What a request's pages are made of, and how an allocation grows them.

    One pool of pages of ``page_size`` tokens serves every KV cache group. A
    *full* group holds a page for every token of the request (``ceil(tokens /
    B)``); a *sliding-window* group of window ``W`` frees the pages that left
    the window at each allocation, so it holds at most ``1 + ceil((W - 2 + d) /
    B)`` pages, where ``d`` bounds the tokens an allocation gives slots beyond
    those already processed (see :meth:`window_pages`).

    Attributes:
        page_size: tokens per page ``B`` (every group's).
        full: full-attention groups (1 for a plain model; 0 for all-sliding).
        windows: the window of each sliding-window group, in tokens.
        decode_step: ``d`` of a decode allocation: the tokens in flight and
            scheduled per step, plus speculative lookahead.
        prefill_step: ``d`` of a prefill allocation (chunks in flight and
            scheduled, plus lookahead).
        batches: steps in flight at once (2 under async scheduling): a chunk's
            pages outlast it by this many allocations less one.
    """

    page_size: int
    full: int = 1
    windows: tuple[int, ...] = ()
    decode_step: int = 1
    prefill_step: int = 1
    batches: int = 1

    @property
    def uniform(self) -> bool:
        """One full-attention group: the plain projection, unchanged."""
        return self.full == 1 and not self.windows

    def window_pages(self, tokens: Any, step: int) -> Any:
        """Most pages the sliding-window groups together hold for a request that
        never gives slots to more than ``tokens`` tokens, when each allocation
        gives slots to at most ``step`` tokens beyond those processed (``tokens``:
        an int or an array of them).

        NOTE: vLLM's ``allocate_slots`` first calls ``remove_skipped_blocks`` with
        the processed tokens ``P`` (computed less in flight), which nulls the first
        ``floor(max(0, P - W + 1) / B)`` pages, then extends the list to
        ``ceil(N / B)`` pages for ``N <= P + d`` slots. With ``P - W + 1 = B a + b``
        (``0 <= b < B``) that leaves ``ceil((b + W - 1 + d) / B) <= 1 + ceil((W - 2
        + d) / B)`` pages (``b = B - 1``; with ``P < W - 1`` fewer), and never more
        than ``ceil(N / B)``. Pages are freed only at the next allocation, so the
        count holds from one allocation to the next.
        """
        b = self.page_size
        total: Any = tokens * 0  # an array of zeros for an array (no windows: none)
        for w in self.windows:
            total = total + np.minimum(-(-tokens // b), 1 + -(-(w - 2 + step) // b))
        return total


class Residents(NamedTuple):
    """The resident requests, in the order they were given.

    Attributes:
        own: tokens each request holds or will hold in pages no other request
            holds (its prompt not yet given pages included), per full group.
        shared: distinct pages that two or more requests hold (or that requests
            outside the list hold): held until the peak, whoever finishes.
        positions: holder key (what :attr:`Hit.sole` names) -> index in the list.
        window: pages each request holds now in its sliding-window groups (all of
            them, shared or not; ``None`` without such groups).
    """

    own: NDArray[np.int64]
    shared: int
    positions: Mapping[Hashable, int]
    window: NDArray[np.int64] | None = None


class Hit(NamedTuple):
    """A waiting request's prefix-cache hit, as admitting it would change residency.

    Read from the hit the scheduler hands the admission (an argument, never state
    kept from an earlier call); :meth:`against` places it among the residents.

    Attributes:
        pinned: pages of the hit that requests hold already (admitting the
            request pins nothing new there).
        sole: ``(holder key, pages)``: pages of the hit exactly one request holds;
            they leave that request's own pages and join the shared ones.
    """

    pinned: int
    sole: list[tuple[Hashable, int]]

    def against(self, residents: Residents) -> tuple[int, list[tuple[int, int]]]:
        """``(pinned, moves)`` among ``residents``: ``moves`` as ``(resident index,
        pages)``. A sole holder not among them (admitted after they were read) keeps
        its pages as its own and they are charged again (conservative)."""
        pinned = self.pinned
        moves: dict[int, int] = {}
        for key, k in self.sole:
            i = residents.positions.get(key)
            if i is None:
                pinned -= k
            else:
                moves[i] = moves.get(i, 0) + k
        return pinned, list(moves.items())


NO_HIT = Hit(0, [])


class ResidencyView(Protocol):
    """The KV cache as the admission policy sees it."""

    @property
    def page_size(self) -> int:
        """Tokens per page (1 for the token layout)."""
        ...

    @property
    def shape(self) -> KVShape:
        """The KV cache groups a request's pages are made of."""
        ...

    @property
    def max_model_len(self) -> int:
        """No request holds more tokens than this."""
        ...

    @property
    def lookahead_tokens(self) -> int:
        """Speculative tokens reserved per request (0 without speculation)."""
        ...

    def capacity(self) -> int:
        """Pages admission may plan for (the pool less reserved pages)."""
        ...

    def held_pages(self) -> int:
        """A lower bound of the pages resident requests hold now (0 if unknown)."""
        ...

    @property
    def shares_held_pages(self) -> bool:
        """Whether requests can hold pages in common (prefix caching) while
        :meth:`held_pages` is exact and :meth:`pages_of` counts each request's pages
        (the paged layout). Then held pages plus what each resident may still add bound
        any peak from above, and the bound is below the sum of ``max_tokens`` pages by
        the pages held in common; without sharing it is not below it."""
        ...

    def pages_of(self, request_ids: list[str]) -> list[int]:
        """Pages each request's list holds now (one full-attention group's); 0 where
        :attr:`shares_held_pages` is false."""
        ...

    def residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        """Read the resident requests; ``totals``: each one's ``num_tokens``, read once
        by the caller."""
        ...

    def own_tokens(self, request: Request, pinned_pages: int) -> int:
        """Tokens ``request`` will hold in pages of its own when ``pinned_pages``
        leading pages of it are held by others."""
        ...

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        """Who holds the pages of this prefix-cache hit (not yet referenced)."""
        ...


class TokenResidency:
    """:class:`ResidencyView` over proxima's 1-token slot pool, read from the KV
    manager's :class:`~vllm_proxima.kv.token_residency.TokenResidencyIndex`.

    Args:
        index: the manager's residency index.
        capacity: slots admission may plan for (usable slots less the watermark).
        max_model_len: no request holds more slots than this.
    """

    page_size = 1
    lookahead_tokens = 0
    shape = KVShape(1)

    def __init__(self, index: TokenResidencyIndex, capacity: int, max_model_len: int) -> None:
        self.index = index
        self._capacity = capacity
        self.max_model_len = max_model_len

    @classmethod
    def of(cls, manager: ProximaKVCacheManager) -> TokenResidency:
        """The view of a token-layout KV manager."""
        return cls(manager.residency_index, manager.capacity_slots, manager.max_model_len)

    def capacity(self) -> int:
        return self._capacity

    shares_held_pages = False  # held_pages is not exact here

    def held_pages(self) -> int:
        return 0  # the pool's used slots include cached ones nobody holds

    def pages_of(self, request_ids: list[str]) -> list[int]:
        return [0] * len(request_ids)

    def own_tokens(self, request: Request, pinned_pages: int) -> int:
        return request.num_tokens - pinned_pages

    def residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        res = self.index.residency([r.request_id for r in running])
        positions = {h: i for i, h in enumerate(res.handles.tolist()) if h >= 0}
        # Tokens not given slots yet (a prefill still in chunks) will be its own too.
        return Residents(res.alone + np.maximum(totals - res.held, 0), res.shared, positions)

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        slots = getattr(computed_blocks, "slots", None)
        if slots is None or not slots.size:
            return NO_HIT
        pinned, sole = self.index.hit_holders(slots[:num_computed_tokens])
        if not sole.size:
            return Hit(pinned, [])
        handles, counts = np.unique(sole, return_counts=True)
        return Hit(pinned, list(zip(handles.tolist(), counts.tolist(), strict=True)))
