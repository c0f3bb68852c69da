"""GPU backend: upstream's Triton ``unified_attention`` kernel over 1-token pages.

The kernel already gathers K/V per token through the block table
(``block_table[seq_offset // BLOCK_SIZE]``), so with ``BLOCK_SIZE == 1`` the
table is a per-token slot table over the same memory. Only the block-size
guards of ``TritonAttentionBackend`` change; metadata, KV writes through
``slot_mapping`` and the kernels are upstream's.
"""

from __future__ import annotations

from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

from vllm_proxima.attention.pages import PackedKVPages


class ProximaTritonAttentionBackend(PackedKVPages, TritonAttentionBackend):
    """Upstream's Triton ``unified_attention`` backend over 1-token pages."""

    supported_kv_cache_dtypes = ["auto", "float16", "bfloat16"]
