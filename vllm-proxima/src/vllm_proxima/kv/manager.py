"""The token-granular KV cache manager.

Speaks the scheduler-facing contract of upstream's ``KVCacheManager`` (allocate
slots or return ``None`` on shortage, free, block ids per request, usage,
prefix-cache stats) but hands out 1-token pages from one global
:class:`~vllm_proxima.kv.slot_pool.SlotPool`: a request's "block ids" are its
slot ids, one per token, and the workers run with ``block_size == 1``.
No upstream block pool is built and there is no Python object per slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vllm_proxima.kv.slot_pool import SlotPool

if TYPE_CHECKING:
    from vllm.v1.request import Request

_EMPTY = np.zeros(0, dtype=np.int32)


def _admitting_statuses() -> tuple[Any, ...]:
    from vllm.v1.request import RequestStatus

    return (RequestStatus.WAITING, RequestStatus.PREEMPTED)


_ADMITTING = _admitting_statuses()


class SlotBlocks:
    """Duck-types upstream's ``KVCacheBlocks`` for one KV cache group.

    ``get_block_ids()`` returns the slot ids (one per token), which the model
    runner appends to the request's row of the block table.
    """

    __slots__ = ("slots",)

    def __init__(self, slots: NDArray[np.int32]) -> None:
        self.slots = slots

    @property
    def blocks(self) -> tuple[NDArray[np.int32], ...]:
        return (self.slots,)

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        if allow_none and self.slots.size == 0:
            return None
        return (self.slots.tolist(),)

    def get_unhashed_block_ids(self) -> list[int]:
        return self.slots.tolist()

    def get_unhashed_block_ids_all_groups(self) -> list[list[int]]:
        return [self.slots.tolist()]

    def new_empty(self) -> SlotBlocks:
        return SlotBlocks(_EMPTY)

    def __add__(self, other: SlotBlocks) -> SlotBlocks:
        return SlotBlocks(np.concatenate((self.slots, other.slots)))

    def __len__(self) -> int:
        return int(self.slots.size)


class _RequestSlots:
    """A request's slot ids in token order, in a buffer grown by doubling."""

    __slots__ = ("buf", "n")

    def __init__(self) -> None:
        self.buf = np.empty(64, dtype=np.int32)
        self.n = 0

    def append(self, slots: NDArray[np.int32]) -> None:
        end = self.n + slots.size
        if end > self.buf.size:
            grown = np.empty(max(end, 2 * self.buf.size), dtype=np.int32)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : end] = slots
        self.n = end

    @property
    def slots(self) -> NDArray[np.int32]:
        return self.buf[: self.n]

    @property
    def last(self) -> int:
        return int(self.buf[self.n - 1]) if self.n else -1


class ProximaKVCacheManager:
    """KV cache manager over a global pool of 1-token slots.

    Args:
        num_slots: slots in the KV cache (``num_gpu_blocks`` at block size 1).
        max_model_len: a request never holds more slots than this.
        log_stats: keep prefix-cache stats objects for the stats path.
        watermark: fraction of slots kept free when admitting new requests
            (upstream's ``--watermark``).
        debug: check the pool's invariants after every change.
    """

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        log_stats: bool = False,
        watermark: float = 0.0,
        debug: bool = False,
    ) -> None:
        from vllm.v1.metrics.stats import PrefixCacheStats

        self.pool = SlotPool(num_slots, num_reserved=1, debug=debug)
        self.max_model_len = max_model_len
        self.log_stats = log_stats
        self.enable_caching = False
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None
        self.watermark_slots = int(watermark * num_slots)
        self.empty_kv_cache_blocks = SlotBlocks(_EMPTY)
        self.req_slots: dict[str, _RequestSlots] = {}

    # ------------------------------------------------------------------ state
    @property
    def usage(self) -> float:
        """Fraction of usable slots held by requests (``vllm:kv_cache_usage_perc``)."""
        return self.pool.usage

    @property
    def num_free_slots(self) -> int:
        return self.pool.num_free

    def num_slots_of(self, request_id: str) -> int:
        held = self.req_slots.get(request_id)
        return held.n if held is not None else 0

    def stranded_by_block16(self) -> int:
        """Slots that block-16 rounding would leave empty right now."""
        if not self.req_slots:
            return 0
        held = np.fromiter(
            (r.n for r in self.req_slots.values()), dtype=np.int64, count=len(self.req_slots)
        )
        return int(((-held) % 16).sum())

    # ------------------------------------------------------------- allocation
    def get_computed_blocks(self, request: Request) -> tuple[SlotBlocks, int, int]:
        """No prefix cache yet: nothing is ever computed ahead."""
        return self.empty_kv_cache_blocks, 0, 0

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: SlotBlocks | None = None,
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        num_encoder_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
        has_scheduled_reqs: bool = True,
    ) -> SlotBlocks | None:
        """Take slots for the request's new tokens; ``None`` on shortage.

        Same layout and arguments as upstream's ``KVCacheManager.allocate_slots``;
        one slot per token, so no rounding.
        """
        if num_new_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError(
                "num_new_tokens must be greater than 0 when there are no external computed tokens"
            )
        held = self.req_slots.get(request.request_id)
        have = held.n if held is not None else 0
        computed = min(
            request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
            self.max_model_len,
        )
        need = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        num_to_allocate = max(0, need - have)

        watermark = 0
        if self.watermark_slots and has_scheduled_reqs and request.status in _ADMITTING:
            watermark = self.watermark_slots
        available = self.pool.num_free - reserved_blocks
        if full_sequence_must_fit:
            full = max(0, min(request.num_tokens, self.max_model_len) - have)
            if full + watermark > available:
                return None
        if num_to_allocate + watermark > available:
            return None
        if num_to_allocate == 0:
            if held is None:
                self.req_slots[request.request_id] = _RequestSlots()
            return self.empty_kv_cache_blocks

        slots = self.pool.allocate(num_to_allocate, after=held.last if held else -1)
        if slots is None:  # pragma: no cover - guarded by the check above
            return None
        if held is None:
            held = self.req_slots[request.request_id] = _RequestSlots()
        held.append(slots)
        return SlotBlocks(slots)

    def free(self, request: Request) -> None:
        """Return every slot of the request to the pool."""
        held = self.req_slots.pop(request.request_id, None)
        if held is not None and held.n:
            self.pool.free(held.slots)

    # ------------------------------------------------------------ block ids
    def get_blocks(self, request_id: str) -> SlotBlocks:
        held = self.req_slots.get(request_id)
        if held is None or held.n == 0:
            return self.empty_kv_cache_blocks
        return SlotBlocks(held.slots.copy())

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    def get_block_ids_for_computed_tokens(
        self, request_id: str, num_computed_tokens: int
    ) -> tuple[list[int], ...]:
        held = self.req_slots.get(request_id)
        if held is None:
            return ([],)
        return (held.slots[:num_computed_tokens].tolist(),)

    def create_kv_cache_blocks(self, blocks: tuple[Any, ...]) -> SlotBlocks:
        slots = np.asarray(blocks[0], dtype=np.int32) if blocks else _EMPTY
        return SlotBlocks(slots) if slots.size else self.empty_kv_cache_blocks

    # ------------------------------------------------- prefix cache (none yet)
    def make_prefix_cache_stats(self) -> Any:
        if not self.log_stats:
            return None
        from vllm.v1.metrics.stats import PrefixCacheStats

        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def reset_prefix_cache(self) -> bool:
        if self.log_stats and self.prefix_cache_stats is not None:
            self.prefix_cache_stats.reset = True
        return True

    def estimate_cached_tokens(self, request: Request) -> int:
        return 0

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        return None

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
