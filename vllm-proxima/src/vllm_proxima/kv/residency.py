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


class Residents(NamedTuple):
    """The resident requests, in the order they were given.

    Attributes:
        own: tokens each request holds or will hold in pages no other request
            holds (its prompt not yet given pages included).
        shared: distinct pages that two or more requests hold (or that requests
            outside the list hold): held until the peak, whoever finishes.
        positions: holder key (what :attr:`Hit.sole` names) -> index in the list.
    """

    own: NDArray[np.int64]
    shared: int
    positions: Mapping[Hashable, int]


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

    def held_pages(self) -> int:
        return 0  # the pool's used slots include cached ones nobody holds

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
