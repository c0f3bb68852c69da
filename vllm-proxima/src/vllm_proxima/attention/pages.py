"""What makes one of upstream's paged attention backends take 1-token pages.

vLLM 0.26.0's backends refuse block sizes that are not multiples of 16 in two places,
``get_supported_kernel_block_sizes`` and ``get_kv_cache_shape``; their kernels do not
care. Mixed in before the upstream class, these lift the guards and register the
class in vLLM's ``CUSTOM`` attention slot. Metadata, KV writes and kernels stay
upstream's.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.attention.backend import MultipleOf


class OneTokenPages:
    """Block-size guards that accept 1, and the ``CUSTOM`` backend name."""

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[int | MultipleOf]:
        # vLLM 0.32+ passes the layer's KV cache spec; 0.26 passes nothing. Any size fits.
        return [MultipleOf(1)]

    @classmethod
    def supports_block_size(cls, block_size: int | None) -> bool:
        return block_size is None or block_size >= 1


class PackedKVPages(OneTokenPages):
    """The K/V layout of upstream's Triton and FlashAttention backends, unguarded."""

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        # Upstream's logical layout (B, H, N, 2*D) without its multiple-of-16 guard;
        # quantized KV (padded heads) is refused by proxima's config.
        return (num_blocks, num_kv_heads, block_size, 2 * head_size)
