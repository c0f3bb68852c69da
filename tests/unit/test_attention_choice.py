"""Which class proxima registers as vLLM's CUSTOM attention backend."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from vllm_proxima import attention  # noqa: E402
from vllm_proxima.config import ProximaConfigError  # noqa: E402


class _Capability:
    def __init__(self, major: int) -> None:
        self.major = major


class _Platform:
    def __init__(self, cuda: bool, major: int = 9) -> None:
        self.cuda = cuda
        self.major = major

    def is_cuda_alike(self) -> bool:
        return self.cuda

    def get_device_capability(self) -> _Capability:
        return _Capability(self.major)


@pytest.fixture()
def gpu(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import vllm.platforms

    monkeypatch.setattr(vllm.platforms, "current_platform", _Platform(cuda=True))
    monkeypatch.delenv(attention.ENV, raising=False)
    return monkeypatch


def test_cpu_gets_the_torch_backend_whatever_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.platforms

    monkeypatch.setattr(vllm.platforms, "current_platform", _Platform(cuda=False))
    monkeypatch.setenv(attention.ENV, "flash_attn")
    assert attention.backend_path_for_current_platform() == attention.TORCH_BACKEND


def test_gpu_default_is_triton_and_flash_attn_is_opt_in(gpu: pytest.MonkeyPatch) -> None:
    assert attention.backend_path_for_current_platform() == attention.TRITON_BACKEND
    gpu.setenv(attention.ENV, "FLASH_ATTN")
    assert attention.backend_path_for_current_platform() == attention.FLASH_BACKEND


def test_an_unknown_choice_is_refused_by_name(gpu: pytest.MonkeyPatch) -> None:
    gpu.setenv(attention.ENV, "xformers")
    with pytest.raises(ProximaConfigError, match="PROXIMA_ATTENTION='xformers'"):
        attention.backend_path_for_current_platform()


def test_flash_backend_takes_one_token_pages() -> None:
    pytest.importorskip("vllm.v1.attention.backends.flash_attn")
    from vllm_proxima.attention.flash_backend import ProximaFlashAttentionBackend as B

    assert B.get_name() == "CUSTOM"
    assert B.supports_block_size(1) and B.supports_block_size(7)
    assert B.get_kv_cache_shape(100, 1, 8, 128) == (100, 8, 1, 256)


@pytest.mark.parametrize("major", [8, 10])
def test_flash_attn_falls_back_to_triton_without_fa3(gpu: pytest.MonkeyPatch, major: int) -> None:
    """FA2 (Ampere/Ada) refuses 1-token pages, and only FA3 on Hopper was measured:
    elsewhere the token layout reads pages with Triton, which runs on any GPU."""
    import vllm.platforms

    gpu.setattr(vllm.platforms, "current_platform", _Platform(cuda=True, major=major))
    gpu.setenv(attention.ENV, "flash_attn")
    assert attention.backend_path_for_current_platform() == attention.TRITON_BACKEND


def test_start_line_names_the_token_kernel(gpu: pytest.MonkeyPatch) -> None:
    assert "Triton" in attention.describe_token_backend()
    gpu.setenv(attention.ENV, "flash_attn")
    assert "FlashAttention" in attention.describe_token_backend()
