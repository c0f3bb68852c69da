"""The token-granular KV cache manager.

Speaks the scheduler-facing contract of upstream's ``KVCacheManager`` (allocate
slots or return ``None`` on shortage, free, block ids per request, usage,
prefix-cache stats) but hands out 1-token pages from one global
:class:`~vllm_proxima.kv.slot_pool.SlotPool`: a request's "block ids" are its
slot ids, one per token, and the workers run with ``block_size == 1``.
No upstream block pool is built and there is no Python object per slot.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vllm_proxima.kv.manager_contract import SlotManagerContract
from vllm_proxima.kv.radix import RadixCache
from vllm_proxima.kv.slot_blocks import EMPTY_SLOTS, RequestSlots, SlotBlocks
from vllm_proxima.kv.slot_pool import SlotPool
from vllm_proxima.kv.token_figures import TokenLayoutFigures
from vllm_proxima.kv.token_residency import TokenResidencyIndex
from vllm_proxima.upstream_compat import SCHEDULER_RECORDS_HITS

if TYPE_CHECKING:
    from vllm.v1.request import Request

logger = logging.getLogger("vllm.proxima")

USAGE_RECOUNT_FACTOR = 50.0
"""The evictable-slot recount waits this many times its own duration (<= 2 % of the time)."""


def _admitting_statuses() -> tuple[Any, ...]:
    from vllm.v1.request import RequestStatus

    return (RequestStatus.WAITING, RequestStatus.PREEMPTED)


_ADMITTING = _admitting_statuses()


class ProximaKVCacheManager(SlotManagerContract, TokenLayoutFigures):
    """KV cache manager over a global pool of 1-token slots.

    Args:
        num_slots: slots in the KV cache (``num_gpu_blocks`` at block size 1).
        max_model_len: a request never holds more slots than this.
        log_stats: keep prefix-cache stats objects for the stats path.
        watermark: fraction of slots kept free when admitting new requests
            (upstream's ``--watermark``).
        debug: check the pool's invariants after every change.
        prefix_sharing: share KV between requests through a token-level radix
            cache (vLLM's prefix caching, at token granularity).
        evict: the prefix cache's eviction policy (``lru``, ``lfu``, ``arc``).
    """

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        log_stats: bool = False,
        watermark: float = 0.0,
        debug: bool = False,
        prefix_sharing: bool = False,
        evict: str = "lru",
    ) -> None:
        from vllm.v1.metrics.stats import PrefixCacheStats

        self.pool = SlotPool(num_slots, num_reserved=1, debug=debug)
        self.max_model_len = max_model_len
        self.log_stats = log_stats
        self.cache: RadixCache | None = (
            RadixCache(self.pool, evict, debug=debug) if prefix_sharing else None
        )
        self.enable_caching = self.cache is not None
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None
        self._evictable = 0  # cached slots nobody else holds, refreshed by usage
        # Extra slots freed per eviction: 0.2 % of the pool, at least 64, at most 1/64.
        self._evict_ahead = min(max(64, num_slots // 512), num_slots // 64)
        self._usage_key = -1
        self._usage_next = 0.0  # time.monotonic() before which usage does not recount
        self._version = 0  # bumped by every change of the pool or the cache
        self.watermark_slots = int(watermark * num_slots)
        self.capacity_slots = self.pool.num_usable - self.watermark_slots
        """Slots admission may plan for: the usable slots less the watermark."""
        self.empty_kv_cache_blocks = SlotBlocks(EMPTY_SLOTS)
        self.req_slots: dict[str, RequestSlots] = {}
        # What admission reads: fed by this manager's events, never by its internals.
        self.residency_index = TokenResidencyIndex(num_slots, sharing=self.cache is not None)
        self.residency_index.cache_attached(self.cache.holders if self.cache else None)

    # ------------------------------------------------------------------ state
    @property
    def usage(self) -> float:
        """Fraction of usable slots held by requests (``vllm:kv_cache_usage_perc``).

        As in stock vLLM, cached KV that eviction could free counts as free.
        NOTE: the evictable count is one O(num_slots) vectorised pass (~0.5 ms at
        16k slots, ~2 ms at 128k), redone when the pool or the cache changed: on every
        call up to 1k slots; above, at most once per 50x its last duration (<= 2 % of
        the scheduler's time: every ~25 ms at 16k slots, ~100 ms at 128k). A call
        counter (every 4th call) spent ~125 us a step at 16k slots.
        While no request holds slots every used slot is the cache's alone, so
        evictable: 0.0, exact at once (the gauge is last set on an idle step).
        """
        if self.cache is None or not self.cache.num_cached_slots:
            return self.pool.usage
        if not self.req_slots:
            return 0.0
        if self._version != self._usage_key:
            now = time.monotonic()
            if self.pool.num_slots <= 1 << 10 or now >= self._usage_next:
                self._evictable = self.cache.num_evictable_slots
                self._usage_key = self._version
                self._usage_next = now + USAGE_RECOUNT_FACTOR * (time.monotonic() - now)
        used = max(0, self.pool.num_used - self._evictable)
        return used / self.pool.num_usable

    @staticmethod
    def namespace(request: Request) -> tuple[int, str | None] | None:
        """Requests share KV only within one namespace (stock's isolation rules:
        the LoRA adapter and the cache salt); ``None``: never cached (multimodal)."""
        if getattr(request, "mm_features", None):
            return None
        lora = request.lora_request.lora_int_id if request.lora_request else 0
        return (lora, request.cache_salt)

    # ------------------------------------------------------------- allocation
    def get_computed_blocks(self, request: Request) -> tuple[SlotBlocks, int, int]:
        """The longest cached prefix of the request, at token granularity.

        The last token is always recomputed (its logits are needed), so at most
        ``num_tokens - 1`` tokens hit. No references are taken here:
        ``allocate_slots`` takes them for the hit it is given.
        """
        if self.cache is None or request.skip_reading_prefix_cache:
            return self.empty_kv_cache_blocks, 0, 0
        ns = self.namespace(request)
        if ns is None:
            return self.empty_kv_cache_blocks, 0, 0
        tokens = np.asarray(request.all_token_ids[: request.num_tokens - 1], dtype=np.int32)
        # A peek: a waiting request may be looked up every step before it is
        # admitted; the cache is told once, when allocate_slots takes the hit.
        slots, hit = self.cache.match(tokens, ns, touch=False)
        if not SCHEDULER_RECORDS_HITS:  # vLLM 0.26: the lookup records
            self.record_prefix_cache_stats(request, hit)
        if hit == 0:
            return self.empty_kv_cache_blocks, 0, 0
        return SlotBlocks(slots), hit, 0

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
        skip_zeroing_group_ids: tuple[int, ...] = (),  # vLLM 0.32+; no zeroing at 1-token pages
    ) -> SlotBlocks | None:
        """Take slots for the request's new tokens; ``None`` on shortage.

        Same layout and arguments as upstream's ``KVCacheManager.allocate_slots``;
        one slot per token, so no rounding. Steps: a running request's plain growth
        (every decode step) from the free list; otherwise count what is needed, take
        the hit's references, evict ahead of a shortfall, record the hit and take the
        new slots; both paths end in :meth:`_append`.
        """
        held = self.req_slots.get(request.request_id)
        if (
            held is not None
            and num_new_tokens > 0
            and new_computed_blocks is None
            and not (num_new_computed_tokens or num_external_computed_tokens or reserved_blocks)
            and not full_sequence_must_fit
            and not (self.watermark_slots and request.status in _ADMITTING)
        ):
            grown = self._grow(
                request, held, num_new_tokens, num_lookahead_tokens, delay_cache_blocks
            )
            if grown is not None:
                return grown
        if num_new_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError(
                "num_new_tokens must be greater than 0 when there are no external computed tokens"
            )
        hit = new_computed_blocks.slots if new_computed_blocks is not None else EMPTY_SLOTS
        have = (held.n if held is not None else 0) + hit.size
        computed = min(
            request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
            self.max_model_len,
        )
        need = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        num_to_allocate = max(0, need - have)
        want = num_to_allocate
        if full_sequence_must_fit:
            want = max(want, min(request.num_tokens, self.max_model_len) - have)
        if self.watermark_slots and has_scheduled_reqs and request.status in _ADMITTING:
            want += self.watermark_slots
        self._version += 1
        if not self._reserve(hit, want, reserved_blocks):
            return None
        held = self._take_hit(request, held, hit)
        if num_to_allocate == 0:
            return self.empty_kv_cache_blocks
        return self._append(
            request, held, num_to_allocate, computed + num_new_tokens, delay_cache_blocks
        )

    def _grow(
        self,
        request: Request,
        held: RequestSlots,
        num_new_tokens: int,
        num_lookahead_tokens: int,
        delay_cache_blocks: bool,
    ) -> SlotBlocks | None:
        """A running request's next tokens from the free list; ``None``: not enough
        free slots (the general path evicts). No hit, no watermark, no reservation."""
        computed = request.num_computed_tokens
        need = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        k = need - held.n
        if k > self.pool.num_free:
            return None
        self._version += 1
        if k <= 0:
            return self.empty_kv_cache_blocks
        return self._append(request, held, k, computed + num_new_tokens, delay_cache_blocks)

    def _reserve(self, hit: NDArray[np.int32], want: int, reserved_blocks: int) -> bool:
        """Reference the hit (so eviction cannot take it), then evict ahead of a
        shortfall of ``want`` free slots beyond ``reserved_blocks``; ``False`` (the hit
        released again) if they cannot be had."""
        if hit.size:
            self.pool.incref(hit)
        short = want - (self.pool.num_free - reserved_blocks)
        if short > 0 and self.cache is not None:
            # Evict a little ahead (the LRU tail either way): one eviction per decode
            # slot cost ~70 us each on a full pool; a batch serves the next steps.
            self.cache.evict(short + self._evict_ahead)
        if want > self.pool.num_free - reserved_blocks:
            if hit.size:
                self.pool.free(hit)
            return False
        return True

    def _take_hit(
        self, request: Request, held: RequestSlots | None, hit: NDArray[np.int32]
    ) -> RequestSlots:
        """The request's slot record (new at admission, its lookup then counted once),
        with the referenced ``hit`` appended and told to the cache's policy."""
        ns = self.namespace(request) if self.cache is not None else None
        if held is None:
            held = self.req_slots[request.request_id] = RequestSlots()
            self.residency_index.allocated(request.request_id, 0)
            if self.cache is not None and ns is not None and not request.skip_reading_prefix_cache:
                # The admission of a request looked up (peeked) at in get_computed_blocks:
                # count its lookup once, whole, as vLLM counts prefix_cache_queries.
                self.cache.record_lookup(max(request.num_tokens - 1, 0), hit.size)
        if hit.size:
            held.append(hit)
            self.residency_index.allocated(request.request_id, held.n)
            self.residency_index.cached(request.request_id, held.slots[held.cached :])
            held.cached = held.n  # already in the cache
            if self.cache is not None and ns is not None:
                self.cache.match(
                    np.asarray(request.all_token_ids[: hit.size], dtype=np.int32),
                    ns,
                    count=False,
                )
        return held

    def _append(
        self,
        request: Request,
        held: RequestSlots,
        k: int,
        num_tokens_after: int,
        delay_cache_blocks: bool,
    ) -> SlotBlocks | None:
        """``k`` new slots after the request's last (contiguous when possible); the
        prompt covered by ``num_tokens_after`` offered to the cache."""
        slots = self.pool.allocate(k, after=held.last)
        if slots is None:  # pragma: no cover - the callers checked the free slots
            return None
        held.append(slots)
        self.residency_index.allocated(request.request_id, held.n)
        if (
            self.cache is not None
            and not delay_cache_blocks
            and held.cached < request.num_prompt_tokens
        ):
            # As stock caches blocks when they are allocated: later requests in
            # this very step may already share the prompt (its KV is written
            # before attention reads it, layer by layer).
            self._offer(request, held, min(num_tokens_after, request.num_prompt_tokens))
        return SlotBlocks(slots)

    def free(self, request: Request) -> None:
        """Return every slot of the request to the pool.

        With prefix sharing, the request's computed tokens (prompt and output) are
        offered to the cache first, on finish and on preemption alike: a preempted
        request that resumes, or a next chat turn, finds them there.
        """
        held = self.req_slots.pop(request.request_id, None)
        # First: what it offers now is nobody's once it is gone, so the index copies
        # none of it (its owner entry would only ever be overwritten by a later hit).
        self.residency_index.freed(request.request_id)
        if held is None or not held.n:
            return
        self._version += 1
        if self.cache is not None:
            self._offer(request, held, request.num_computed_tokens)
        self.pool.free(held.slots)

    # ------------------------------------------------------------ prefix cache
    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache; ``False`` (and nothing done) while requests hold KV.

        As upstream's ``BlockPool.reset_prefix_cache``: True means no KV computed
        before the call is reusable, so the scheduler's
        ``reset_prefix_cache(reset_running_requests=True)`` preempts first.
        """
        if self.req_slots:
            logger.warning(
                "Failed to reset prefix cache because some slots (%d requests) are not freed yet",
                len(self.req_slots),
            )
            return False
        self._version += 1
        if self.cache is not None:
            self.cache.reset()
            self.residency_index.cache_attached(self.cache.holders)
        if self.log_stats and self.prefix_cache_stats is not None:
            self.prefix_cache_stats.reset = True
        return True

    def set_eviction_policy(self, policy: str) -> None:
        """Empty the prefix cache and start it again with another eviction policy.

        For benchmarks that compare policies on one engine; only while no request
        holds slots.
        """
        if self.cache is None:
            raise ValueError("prefix sharing is off: no eviction policy to set")
        if self.req_slots:
            raise RuntimeError(
                f"{len(self.req_slots)} requests hold slots: set the policy while idle"
            )
        self.reset_prefix_cache()
        self.cache = RadixCache(self.pool, policy, debug=self.pool.debug)
        self.residency_index.cache_attached(self.cache.holders)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Offer the request's prompt to the cache as its chunks are scheduled.

        Decode tokens are offered once, when the request is freed: inserting
        every step would walk the tree per request per step.
        """
        if self.cache is None:
            return
        held = self.req_slots.get(request.request_id)
        if held is None or held.cached >= request.num_prompt_tokens:
            return
        self._offer(request, held, min(num_computed_tokens, request.num_prompt_tokens))

    def _offer(self, request: Request, held: RequestSlots, num_tokens: int) -> None:
        assert self.cache is not None
        n = min(num_tokens, held.n, request.num_tokens)
        if n <= held.cached:
            return
        ns = self.namespace(request)
        if ns is None:
            return
        tokens = np.asarray(request.all_token_ids[:n], dtype=np.int32)
        self.cache.insert(tokens, held.slots[:n], ns)
        self.residency_index.cached(request.request_id, held.slots[held.cached : n])
        held.cached = n
