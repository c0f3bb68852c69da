"""Attention over 1-token pages: Triton (or, experimental, FlashAttention) on GPU, torch on CPU."""

from __future__ import annotations

import os

TORCH_BACKEND = "vllm_proxima.attention.torch_backend.ProximaTorchAttentionBackend"
TRITON_BACKEND = "vllm_proxima.attention.triton_backend.ProximaTritonAttentionBackend"
FLASH_BACKEND = "vllm_proxima.attention.flash_backend.ProximaFlashAttentionBackend"

# $PROXIMA_ATTENTION -> GPU backend. Read by the plugin in every vLLM process (workers
# inherit the environment), so all ranks agree.
GPU_BACKENDS = {"triton": TRITON_BACKEND, "flash_attn": FLASH_BACKEND}
ENV = "PROXIMA_ATTENTION"


def backend_path_for_current_platform() -> str:
    """The class path registered as vLLM's CUSTOM attention backend here.

    Raises:
        ValueError: ``$PROXIMA_ATTENTION`` names no GPU backend.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cuda_alike():
        return TORCH_BACKEND
    choice = os.environ.get(ENV, "triton").strip().lower() or "triton"
    if choice not in GPU_BACKENDS:
        raise ValueError(
            f"${ENV}={choice!r}: choose one of {', '.join(sorted(GPU_BACKENDS))} (default triton)"
        )
    return GPU_BACKENDS[choice]
