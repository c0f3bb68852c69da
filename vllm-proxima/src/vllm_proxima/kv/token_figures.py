"""Read-only figures of the token layout's KV manager, for ``proxima:*`` metrics."""

from __future__ import annotations

import numpy as np

from vllm_proxima.kv.radix import RadixCache
from vllm_proxima.kv.slot_blocks import RequestSlots


class TokenLayoutFigures:
    """Figures over ``req_slots`` (request id -> its slots) and the prefix ``cache``."""

    req_slots: dict[str, RequestSlots]
    cache: RadixCache | None

    def num_slots_of(self, request_id: str) -> int:
        held = self.req_slots.get(request_id)
        return held.n if held is not None else 0

    def cache_stats(self) -> dict[str, float]:
        """Prefix-cache figures for ``proxima:*`` metrics (O(num_slots): call sparingly)."""
        if self.cache is None:
            return {}
        st = self.cache.stats()
        return {
            "cached_slots": st.cached,
            "shared_slots": st.shared,
            "prefix_hits_tokens": st.hits,
            "prefix_queries_tokens": st.queries,
            "evictions": st.evicted,
        }

    def stranded_by_block16(self) -> int:
        """Slots that block-16 rounding would leave empty right now."""
        if not self.req_slots:
            return 0
        held = np.fromiter(
            (r.n for r in self.req_slots.values()), dtype=np.int64, count=len(self.req_slots)
        )
        return int(((-held) % 16).sum())
