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

Several KV cache groups (vLLM's hybrid KV cache manager: full-attention and
sliding-window layers over one pool, :func:`kv_cache_shape`): pages are summed over
groups. Every full group's list is like the first's (hits and growth are common to
all groups); a sliding group's list is null pages (left the window) then real ones,
whose shared pages need not lead, so they are counted one by one (at most the window's
pages per request).

Cost per call: O(requests x log(pages)); O(requests) without prefix caching; plus
O(requests x window pages) per sliding group with prefix caching.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from vllm_proxima.kv.residency import NO_HIT, Hit, KVShape, Residents

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import KVCacheBlock
    from vllm.v1.request import Request


class UnprojectableKVCache(ValueError):
    """The KV cache has a shape the projection does not model (yet)."""


def kv_cache_shape(manager: KVCacheManager, **steps: int) -> KVShape:
    """The per-group shape of upstream's KV cache, read from the coordinator's
    managers: full-attention groups (``FullAttentionManager``: a page per token,
    a ``FullAttentionSpec`` with a ``sliding_window`` included, which vLLM then
    allocates in full) and sliding-window groups (``SlidingWindowManager``), all of
    one page size. ``steps``: :class:`~vllm_proxima.kv.residency.KVShape`'s
    ``decode_step``, ``prefill_step`` and ``batches``.

    Raises:
        UnprojectableKVCache: any other group (chunked-local, Mamba, cross-attention,
            sink, ...), or groups of different page sizes.
    """
    from vllm.v1.core.single_type_kv_cache_manager import (
        FullAttentionManager,
        SlidingWindowManager,
    )

    managers = manager.coordinator.single_type_managers
    full = 0
    windows: list[int] = []
    sizes = set()
    for m in managers:
        if type(m) is FullAttentionManager:
            full += 1
        elif type(m) is SlidingWindowManager:
            windows.append(int(m.sliding_window))
        else:
            raise UnprojectableKVCache(
                f"a {type(m.kv_cache_spec).__name__} KV cache group ({type(m).__name__})"
            )
        sizes.add(int(m.block_size))
    if len(sizes) != 1:
        raise UnprojectableKVCache(f"KV cache groups of page sizes {sorted(sizes)}")
    return KVShape(sizes.pop(), full, tuple(windows), **steps)


def _shared_run(blocks: Sequence[KVCacheBlock]) -> int:
    """Leading pages that two or more requests hold (reference counts fall along
    a prefix chain; a rare duplicate block breaks that, and then this is a bound)."""
    if not blocks or blocks[0].ref_cnt < 2:
        return 0
    return bisect_left(blocks, True, key=lambda b: b.ref_cnt < 2)


def _first_live(blocks: Sequence[KVCacheBlock]) -> int:
    """Index of a sliding-window page list's first real page: the pages that left
    the window are null pages, a leading run (``remove_skipped_blocks`` nulls from
    the front; a hit pads its skipped pages with nulls)."""
    if not blocks or not blocks[0].is_null:
        return 0
    return bisect_left(blocks, True, key=lambda b: not b.is_null)


class PagedResidency:
    """:class:`~vllm_proxima.kv.residency.ResidencyView` over upstream's block pool.

    Pages are summed over the KV cache groups (one pool serves them all): per
    full-attention group a request holds a page per ``B`` tokens, its shared
    leading run counted once in ``shared``; per sliding-window group the real
    pages of its list (:attr:`Residents.window`), those it holds alone left out
    of ``shared``.

    Args:
        manager: upstream's ``KVCacheManager``.
        shape: its groups (:func:`kv_cache_shape`).
        lookahead_tokens: tokens a request may hold beyond its final ones: the
            scheduler's lookahead slots plus the drafts scheduled in a step.
    """

    def __init__(self, manager: KVCacheManager, shape: KVShape, lookahead_tokens: int = 0) -> None:
        self.manager = manager
        self.shape = shape
        self.page_size = shape.page_size
        self.lookahead_tokens = lookahead_tokens
        self.pool = manager.block_pool
        from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

        managers = manager.coordinator.single_type_managers
        windowed = [type(m) is SlidingWindowManager for m in managers]
        # Group indices (a hit's ``blocks[g]``) and page lists, full and sliding.
        self._full_groups = [g for g, w in enumerate(windowed) if not w]
        self._full: list[Mapping[str, list[KVCacheBlock]]] = [
            managers[g].req_to_blocks for g in self._full_groups
        ]
        self._window: list[Mapping[str, list[KVCacheBlock]]] = [
            m.req_to_blocks for m, w in zip(managers, windowed, strict=True) if w
        ]
        self._fulls = len(self._full)
        # Full groups' page lists: the first speaks for the holders of a hit.
        self._blocks: Mapping[str, list[KVCacheBlock]] = self._full[0] if self._full else {}
        self._sharing = bool(manager.enable_caching)

    @property
    def max_model_len(self) -> int:
        return int(self.manager.max_model_len)

    def capacity(self) -> int:
        # Page 0 is the null page; the watermark is kept free for admissions.
        return self.pool.num_gpu_blocks - 1 - self.manager.watermark_blocks

    @property
    def shares_held_pages(self) -> bool:
        return self._sharing

    def held_pages(self) -> int:
        """Pages some request holds (free pages include cached, evictable ones)."""
        return self.pool.num_gpu_blocks - 1 - self.pool.get_num_free_blocks()

    def pages_of(self, request_ids: list[str]) -> list[int]:
        """Pages each request's list holds now in the first full-attention group."""
        blocks = self._blocks
        return [len(blocks.get(i, ())) for i in request_ids]

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
        if self._fulls == 1 and not self._window:
            return self._plain_residents(running, totals)
        return self._grouped_residents(running, totals)

    def _plain_residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        """:meth:`residents` for one full-attention group (most models): the page lists'
        lengths read at C speed, a bisection only for lists that start shared. Admission
        reads the residents once a step, so at 400 requests this is most of its cost."""
        rids = [r.request_id for r in running]
        lists = list(map(self._blocks.get, rids, repeat(())))
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        own = totals + self.lookahead_tokens
        alone = int(lengths.sum())
        holding = lengths > 0
        positions: dict[Hashable, int] = {}
        if self._sharing:
            positions = dict(zip(rids, range(len(rids)), strict=True))
            page = self.page_size
            for i, blocks in enumerate(lists):
                if blocks and blocks[0].ref_cnt >= 2:
                    shared = _shared_run(blocks)
                    lengths[i] -= shared
                    own[i] -= page * shared
                    alone -= shared
        if self.lookahead_tokens:
            # Never less than the pages it holds already (rejected drafts' pages).
            own = np.where(holding, np.maximum(own, self.page_size * (lengths - 1) + 1), own)
        return Residents(own, max(0, self.held_pages() - alone), positions, None)

    def _grouped_residents(self, running: list[Request], totals: NDArray[np.int64]) -> Residents:
        """:meth:`residents` for several full groups or sliding-window groups."""
        page = self.page_size
        first, *others = self._full or [{}]
        fulls = self._fulls
        sharing = self._sharing
        own = totals + self.lookahead_tokens
        alone = 0
        positions: dict[Hashable, int] = {}
        window = np.zeros(len(running), dtype=np.int64) if self._window else None
        for i, r in enumerate(running):
            rid = r.request_id
            blocks = first.get(rid)
            if blocks:
                held = len(blocks)
                if sharing:
                    positions[rid] = i
                    shared = _shared_run(blocks) if blocks[0].ref_cnt >= 2 else 0
                    for lists in others:
                        # Every full group's lists are alike; the longest shared run of
                        # them leaves the fewest pages its own (never more than it holds).
                        shared = max(shared, _shared_run(lists.get(rid, ())))
                    if shared:
                        held -= shared
                        own[i] -= page * shared
                alone += fulls * held
                if self.lookahead_tokens:
                    # Never less than the pages it holds already (rejected drafts' pages).
                    own[i] = max(own[i], page * (held - 1) + 1)
            if window is not None:
                live = 0
                for lists in self._window:
                    wblocks = lists.get(rid)
                    if not wblocks:
                        continue
                    start = _first_live(wblocks)
                    live += len(wblocks) - start
                    # Alone: pages only it holds (a window's shared pages need not lead).
                    alone += (
                        sum(1 for b in wblocks[start:] if b.ref_cnt == 1)
                        if sharing
                        else len(wblocks) - start
                    )
                window[i] = live
        return Residents(own, max(0, self.held_pages() - alone), positions, window)

    def hit(self, request: Request, computed_blocks: Any, num_computed_tokens: int) -> Hit:
        """The hit in the full groups (a sliding group's pages count in its window
        bound, whoever holds them). Every full group's hit is read; where they
        disagree (a duplicate block in one), no hit is assumed: the candidate is
        charged all its pages and the holders keep theirs (both counted: safe)."""
        if computed_blocks is None or not self._full_groups:
            return NO_HIT
        hit: Hit | None = None
        for n, g in enumerate(self._full_groups):
            blocks: Sequence[KVCacheBlock] = computed_blocks.blocks[g]
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
                group_hit = Hit(pinned, [])
            else:
                holder: str | None = None
                if n == 0:
                    holder = self._holder_of(blocks[first_sole], first_sole)
                elif hit is not None and hit.sole:
                    # The first group's holder, if its list here holds the same run.
                    key = str(hit.sole[0][0])
                    theirs = self._full[n].get(key, ())
                    if len(theirs) > first_sole and theirs[first_sole] is blocks[first_sole]:
                        holder = key
                if holder is None:  # nobody known holds it: its pages stay its holder's own
                    group_hit = Hit(pinned - sole, [])
                else:
                    group_hit = Hit(pinned, [(holder, sole)])
            if hit is None:
                hit = group_hit
            elif group_hit != hit:
                return NO_HIT
        return hit if hit is not None else NO_HIT

    def _holder_of(self, block: KVCacheBlock, position: int) -> str | None:
        """The request holding ``block`` as its page ``position`` (the pages a request
        shares form its leading run, so one block names the holder of the run)."""
        for rid, blocks in self._blocks.items():
            if len(blocks) > position and blocks[position] is block:
                return rid
        return None
