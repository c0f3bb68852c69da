"""GPU backend: upstream's Triton ``unified_attention`` kernel over 1-token pages.

The kernel already gathers K/V per token through the block table
(``block_table[seq_offset // BLOCK_SIZE]``), so with ``BLOCK_SIZE == 1`` the
table is a per-token slot table over the same memory. Only the block-size
guards of ``TritonAttentionBackend`` change; metadata, KV writes through
``slot_mapping`` and the kernels are upstream's.
"""

from __future__ import annotations

from vllm.v1.attention.backend import MultipleOf
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend


class ProximaTritonAttentionBackend(TritonAttentionBackend):
    supported_kv_cache_dtypes = ["auto", "float16", "bfloat16"]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:
        return [MultipleOf(1)]

    @classmethod
    def supports_block_size(cls, block_size: int | None) -> bool:
        return block_size is None or block_size >= 1

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        # Upstream's logical layout (B, H, N, 2*hs) without its multiple-of-16
        # guard; quantized KV (padded heads) is refused by proxima's config.
        return (num_blocks, num_kv_heads, block_size, 2 * head_size)
