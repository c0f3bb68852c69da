"""The parts of upstream's ``KVCacheManager`` contract that 1-token pages answer simply.

:class:`~vllm_proxima.kv.manager.ProximaKVCacheManager` speaks the scheduler-facing
contract of upstream's manager; what needs no allocation logic lives here: block ids
read back from a request's slots, and the hooks that have nothing to do at 1-token
pages (no skipped blocks, no cascade attention, no KV events, no block zeroing or
copies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_proxima.kv.slot_blocks import EMPTY_SLOTS, RequestSlots, SlotBlocks

if TYPE_CHECKING:
    from vllm.v1.request import Request


class _NoGroups:
    """What vLLM 0.32+'s scheduler reads of ``kv_cache_manager.coordinator`` at start: the
    per-group managers, to size a speculative step in blocks. The token layout has none
    (and refuses speculative decoding), so the sum is 0."""

    single_type_managers: tuple[Any, ...] = ()
    enable_partial_hash_hits = False


class SlotManagerContract:
    """Upstream's manager interface over ``req_slots`` (request id -> its slots)."""

    coordinator = _NoGroups()

    req_slots: dict[str, RequestSlots]
    empty_kv_cache_blocks: SlotBlocks
    log_stats: bool
    prefix_cache_stats: Any
    enable_caching: bool

    def get_blocks(self, request_id: str) -> SlotBlocks:
        held = self.req_slots.get(request_id)
        if held is None or held.n == 0:
            return self.empty_kv_cache_blocks
        return SlotBlocks(held.slots.copy())

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return (self.get_blocks(request_id).slots.tolist(),)

    def get_block_ids_for_computed_tokens(
        self, request_id: str, num_computed_tokens: int
    ) -> tuple[list[int], ...]:
        held = self.req_slots.get(request_id)
        if held is None:
            return ([],)
        return (held.slots[:num_computed_tokens].tolist(),)

    def create_kv_cache_blocks(self, blocks: tuple[Any, ...]) -> SlotBlocks:
        slots = np.asarray(blocks[0], dtype=np.int32) if blocks else EMPTY_SLOTS
        return SlotBlocks(slots) if slots.size else self.empty_kv_cache_blocks

    def prefix_cache_lookup_enabled(self, request: Request) -> bool:
        """Whether a prefix-cache lookup may run for this request (upstream's rule)."""
        return self.enable_caching and not request.skip_reading_prefix_cache

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        """Count one lookup and its hit for ``vllm:prefix_cache_*``: called by upstream's
        scheduler at admission from vLLM 0.27 (a request looked up every step while it
        waits counts once), by :meth:`get_computed_blocks` before."""
        if not self.log_stats or self.prefix_cache_stats is None:
            return
        if not self.prefix_cache_lookup_enabled(request):
            return
        self.prefix_cache_stats.record(
            num_tokens=request.num_tokens,
            num_hits=num_hits,
            preempted=request.num_preemptions > 0,
        )

    def make_prefix_cache_stats(self) -> Any:
        if not self.log_stats:
            return None
        from vllm.v1.metrics.stats import PrefixCacheStats

        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def estimate_cached_tokens(self, request: Request) -> int:
        return 0

    def remove_skipped_blocks(
        self,
        request_id: str,
        processed_computed_tokens: int,
        num_prompt_tokens: int | None = None,
    ) -> None:
        return None

    def evict_blocks(self, block_ids: set[int]) -> None:
        return None

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        # Cascade attention is not used with 1-token pages.
        return [0]

    # ----------------------------------------------------- step bookkeeping
    def take_events(self) -> list[Any]:
        return []

    def take_new_block_ids(self) -> list[int]:
        return []

    def get_zeroing_block_ids_in_range(
        self, request_id: str, start_token: int, end_token: int
    ) -> list[int]:
        return []

    def record_blocks_for_zeroing(self, request_id: str, start_token: int) -> None:
        return None

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[Any]]:
        return [], []

    def new_step_starts(self) -> None:
        return None

    # vLLM 0.32+: hand-offs to a KV connector, which the token layout refuses.

    def take_boundary_state_offloads(self) -> dict[str, list[tuple[int, int, int]]]:
        return {}

    def finalize_partial_tail_offloads(self, request: Request) -> list[tuple[int, int, int]]:
        return []
