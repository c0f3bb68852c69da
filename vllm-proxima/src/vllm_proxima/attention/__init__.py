"""Attention for the token layout (1-token pages): Triton (or FlashAttention) on GPU, torch on CPU.

The paged layout registers nothing here: it runs the backend vLLM picks.
"""

from __future__ import annotations

import logging

from vllm_proxima.config import ATTENTION_CHOICES, ATTENTION_ENV, attention_choice

logger = logging.getLogger("vllm.proxima")

TORCH_BACKEND = "vllm_proxima.attention.torch_backend.ProximaTorchAttentionBackend"
TRITON_BACKEND = "vllm_proxima.attention.triton_backend.ProximaTritonAttentionBackend"
FLASH_BACKEND = "vllm_proxima.attention.flash_backend.ProximaFlashAttentionBackend"

# $PROXIMA_ATTENTION -> GPU backend. Read by the plugin in every vLLM process (workers
# inherit the environment), so all ranks agree.
GPU_BACKENDS = {"triton": TRITON_BACKEND, "flash_attn": FLASH_BACKEND}
assert set(GPU_BACKENDS) == set(ATTENTION_CHOICES)
ENV = ATTENTION_ENV


def backend_path_for_current_platform() -> str:
    """The class path registered as vLLM's CUSTOM attention backend here.

    Raises:
        ProximaConfigError: ``$PROXIMA_ATTENTION`` names no GPU backend.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cuda_alike():
        return TORCH_BACKEND
    choice = attention_choice()
    if choice == "flash_attn" and not _has_fa3(current_platform):
        # FA2 (Ampere, Ada) takes only pages that are multiples of 16; only FA3
        # (Hopper) was measured over 1-token pages. Triton runs on every GPU.
        logger.warning(
            "$%s=flash_attn needs FlashAttention 3 (Hopper) for 1-token pages; "
            "this GPU gets the Triton kernel instead",
            ENV,
        )
        choice = "triton"
    return GPU_BACKENDS[choice]


def _has_fa3(platform: object) -> bool:
    """Hopper (compute capability 9.x): FlashAttention 3, which takes any page size."""
    capability = getattr(platform, "get_device_capability", None)
    if capability is None:
        return False
    cap = capability()
    return cap is not None and getattr(cap, "major", None) == 9


def describe_token_backend() -> str:
    """The token layout's kernel, for the start line."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda_alike():
        return "proxima's torch attention (CPU)"
    choice = attention_choice()
    kernel = {"triton": "Triton unified_attention", "flash_attn": "FlashAttention"}.get(
        choice, choice
    )
    return f"{kernel} over 1-token pages (${ENV})"
