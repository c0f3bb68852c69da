"""What the admission policy reads of the KV cache: a residency view.

Admission needs, for the resident (running) requests, how many tokens each will
hold *alone* (they free when it finishes) and how many pages two or more hold
(a shared prefix, freed only when its last holder goes); and, for a waiting
request's prefix-cache hit, which of the hit's pages residents hold already.
Two layouts answer that:

- :class:`~vllm_proxima.kv.paged.PagedResidency`: upstream's block pool (pages of
  the attention backend's block size; vLLM's own prefix caching);
- :class:`TokenResidency`: proxima's global pool of 1-token slots
  (:class:`~vllm_proxima.kv.manager.ProximaKVCacheManager`).

Both speak in **tokens** for what grows and in **pages** for what is shared, so the
policy projects every layout with one formula
(:func:`vllm_proxima.scheduling.admission.projected_peak`); a token layout is
the page size 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.manager import ProximaKVCacheManager


class Residents(NamedTuple):
    """The resident requests, in the order they were given.

    Attributes:
        own: tokens each request holds or will hold in pages no other request
            holds (its prompt not yet given pages included).
        shared: distinct pages that two or more requests hold (or that requests
            outside the list hold): held until the peak, whoever finishes.
    """

    own: NDArray[np.int64]
    shared: int


class Hit(NamedTuple):
    """A waiting request's prefix-cache hit, as admitting it would change residency.

    Attributes:
        pinned: pages of the hit that residents hold already (admitting the
            request pins nothing new there).
        moves: ``(resident index, pages)``: pages of the hit one resident held
            alone; they leave that resident's own pages and join the shared ones.
            A holder the view does not know (admitted after the residents were
            read) is absent, and its pages are charged twice (conservative).
    """

    pinned: int
    moves: list[tuple[int, int]]


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

    def capacity(self) -> int:
        """Pages admission may plan for (the pool less reserved pages)."""
        ...

    def held_pages(self) -> int:
        """A lower bound of the pages resident requests hold now (0 if unknown)."""
        ...

    def residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        """Read the resident requests (remembered for :meth:`hit`); ``totals``: each
        one's ``num_tokens``, read once by the caller."""
        ...

    def own_tokens(self, request: Request, pinned_pages: int) -> int:
        """Tokens ``request`` will hold in pages of its own when ``pinned_pages``
        leading pages of it are held by others."""
        ...

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        """How admitting ``request`` with this prefix-cache hit changes residency."""
        ...


class TokenResidency:
    """:class:`ResidencyView` over proxima's 1-token slot pool."""

    page_size = 1

    def __init__(self, manager: ProximaKVCacheManager) -> None:
        self.manager = manager
        self._index: dict[int, int] = {}

    @property
    def max_model_len(self) -> int:
        return self.manager.max_model_len

    def capacity(self) -> int:
        return self.manager.pool.num_usable - self.manager.watermark_slots

    def held_pages(self) -> int:
        return 0  # the pool's used slots include cached ones nobody holds

    def own_tokens(self, request: Request, pinned_pages: int) -> int:
        return request.num_tokens - pinned_pages

    def residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        res = self.manager.residency([r.request_id for r in running])
        self._index = {h: i for i, h in enumerate(res.handles.tolist()) if h >= 0}
        # Tokens not given slots yet (a prefill still in chunks) will be its own too.
        return Residents(res.alone + np.maximum(totals - res.held, 0), res.shared)

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        slots = getattr(computed_blocks, "slots", None)
        if slots is None or not slots.size:
            return NO_HIT
        pinned, sole = self.manager.hit_holders(slots[:num_computed_tokens])
        moves: dict[int, int] = {}
        if sole.size:
            handles, counts = np.unique(sole, return_counts=True)
            for h, k in zip(handles.tolist(), counts.tolist(), strict=True):
                i = self._index.get(h)
                if i is not None:
                    moves[i] = moves.get(i, 0) + k
                else:  # holder unknown: its slots stay its own and are charged again
                    pinned -= k
        return Hit(pinned, list(moves.items()))
