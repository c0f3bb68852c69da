"""Attention over 1-token pages: Triton on GPU, a torch reference on CPU."""

TORCH_BACKEND = "vllm_proxima.attention.torch_backend.ProximaTorchAttentionBackend"
TRITON_BACKEND = "vllm_proxima.attention.triton_backend.ProximaTritonAttentionBackend"


def backend_path_for_current_platform() -> str:
    """The class path registered as vLLM's CUSTOM attention backend here."""
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return TRITON_BACKEND
    return TORCH_BACKEND
