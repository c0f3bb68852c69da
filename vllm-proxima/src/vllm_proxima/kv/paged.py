"""Residency over upstream's paged KV cache (proxima's default layout).

In the paged layout the KV cache is upstream's own: the block pool, vLLM's prefix
caching and the attention backend vLLM picks for the GPU and model, at its block
size. Proxima changes *which* requests hold pages (projected-peak admission, the
victim policy), not how pages are laid out, so the kernels and the model runner's
inputs are exactly stock's. This module reads the block pool for the admission
policy (:class:`~vllm_proxima.kv.residency.ResidencyView`):

- a request's pages are a prefix chain: every holder of page ``j`` of a prompt
  holds its pages ``0..j-1`` too, so the pages a request shares with others
  (reference count >= 2) are a leading run of its page list, found by bisection;
- the distinct shared pages are the pages held by anyone (the pool's used count)
  less the pages each resident holds alone: no pass over shared prefixes.

Cost per call: O(requests x log(pages)); O(requests) without prefix caching.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vllm_proxima.kv.residency import NO_HIT, Hit, Residents

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import KVCacheBlock
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


class UnprojectableKVCache(ValueError):
    """The KV cache has a shape the projection does not model (yet)."""


def projectable_block_size(kv_cache_config: KVCacheConfig) -> int:
    """The page size of a KV cache the projection models: one full-attention group.

    Raises:
        UnprojectableKVCache: several KV cache groups (hybrid, sliding-window or
            cross-attention layers), or a group that is not plain full attention.
    """
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise UnprojectableKVCache(
            f"{len(groups)} KV cache groups (hybrid, sliding-window or cross-attention layers)"
        )
    spec = groups[0].kv_cache_spec
    if type(spec) is not FullAttentionSpec or getattr(spec, "sliding_window", None):
        raise UnprojectableKVCache(f"a {type(spec).__name__} KV cache")
    return int(spec.block_size)


def _shared_run(blocks: Sequence[KVCacheBlock]) -> int:
    """Leading pages that two or more requests hold (reference counts fall along
    a prefix chain; a rare duplicate block breaks that, and then this is a bound)."""
    if not blocks or blocks[0].ref_cnt < 2:
        return 0
    return bisect_left(blocks, True, key=lambda b: b.ref_cnt < 2)


class PagedResidency:
    """:class:`~vllm_proxima.kv.residency.ResidencyView` over upstream's block pool.

    Args:
        manager: upstream's ``KVCacheManager`` (one full-attention group).
        block_size: its page size (:func:`projectable_block_size`).
        lookahead_tokens: speculative tokens the scheduler reserves per request.
    """

    def __init__(self, manager: KVCacheManager, block_size: int, lookahead_tokens: int = 0) -> None:
        self.manager = manager
        self.page_size = block_size
        self.lookahead_tokens = lookahead_tokens
        self.pool = manager.block_pool
        self._blocks: dict[str, list[KVCacheBlock]] = manager.coordinator.single_type_managers[
            0
        ].req_to_blocks
        self._sharing = bool(manager.enable_caching)

    @property
    def max_model_len(self) -> int:
        return int(self.manager.max_model_len)

    def capacity(self) -> int:
        # Page 0 is the null page; the watermark is kept free for admissions.
        return self.pool.num_gpu_blocks - 1 - self.manager.watermark_blocks

    def held_pages(self) -> int:
        """Pages some request holds (free pages include cached, evictable ones)."""
        return self.pool.num_gpu_blocks - 1 - self.pool.get_num_free_blocks()

    def evictable_pages(self) -> int:
        """Cached pages no request holds (free, but a later hit can still take them).
        One pass over the pool: call sparingly."""
        if not self._sharing:
            return 0
        return sum(1 for b in self.pool.blocks if b.ref_cnt == 0 and b.block_hash is not None)

    def own_tokens(self, request: Request, pinned_pages: int) -> int:
        """Tokens the request will hold in pages of its own, given ``pinned_pages``
        leading pages that others hold."""
        return request.num_tokens + self.lookahead_tokens - self.page_size * pinned_pages

    def residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        page = self.page_size
        blocks_of = self._blocks
        sharing = self._sharing
        own = totals + self.lookahead_tokens
        alone = 0
        positions: dict[Hashable, int] = {}
        for i, r in enumerate(running):
            blocks = blocks_of.get(r.request_id)
            if not blocks:
                continue
            held = len(blocks)
            if sharing:
                positions[r.request_id] = i
                if blocks[0].ref_cnt >= 2:
                    shared = _shared_run(blocks)
                    held -= shared
                    own[i] -= page * shared
            alone += held
            if self.lookahead_tokens:
                # Never less than the pages it holds already (rejected drafts' pages).
                own[i] = max(own[i], page * (held - 1) + 1)
        return Residents(own, max(0, self.held_pages() - alone), positions)

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        blocks: Sequence[KVCacheBlock] = (
            computed_blocks.blocks[0] if computed_blocks is not None else ()
        )
        if not blocks:
            return NO_HIT
        pinned = 0
        first_sole = -1
        sole = 0
        for j, b in enumerate(blocks):
            if b.ref_cnt >= 1:
                pinned += 1
                if b.ref_cnt == 1:
                    sole += 1
                    if first_sole < 0:
                        first_sole = j
        if not sole:
            return Hit(pinned, [])
        holder = self._holder_of(blocks[first_sole], first_sole)
        if holder is None:  # nobody known holds it: its pages stay its holder's own
            return Hit(pinned - sole, [])
        return Hit(pinned, [(holder, sole)])

    def _holder_of(self, block: KVCacheBlock, position: int) -> str | None:
        """The request holding ``block`` as its page ``position`` (the pages a request
        shares form its leading run, so one block names the holder of the run)."""
        for rid, blocks in self._blocks.items():
            if len(blocks) > position and blocks[position] is block:
                return rid
        return None
