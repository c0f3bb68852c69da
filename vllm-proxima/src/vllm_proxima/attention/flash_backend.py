"""GPU backend, experimental: upstream's FlashAttention (FA3 on Hopper) over 1-token pages.

FA3's paged-KV kernels take any page size; only vLLM's guards insist on multiples of 16
(``get_supported_kernel_block_sizes`` and ``get_kv_cache_shape``). On the H200 the decode
kernel at page size 1 ran at 0.96-1.05x of its speed at page size 16, and FA3 was
1.06-2.9x faster than the Triton kernel proxima uses by default (kernel timings on one
H200, MHA/GQA shapes, head dims 64 and 128, decode and prefill). Chosen by
``PROXIMA_ATTENTION=flash_attn``; not measured end to end yet, so not the default.
"""

from __future__ import annotations

from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

from vllm_proxima.attention.pages import PackedKVPages


class ProximaFlashAttentionBackend(PackedKVPages, FlashAttentionBackend):
    """Upstream's FlashAttention backend over 1-token pages."""
