"""Every check of proxima's configuration lives in vllm_proxima.config and raises one type."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_proxima.config import (
    ProximaConfig,
    ProximaConfigError,
    attention_choice,
    default_mode,
)

PACKAGE = Path(__file__).resolve().parents[2] / "vllm-proxima" / "src" / "vllm_proxima"


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"mode": "maybe"}, "--proxima must be one of"),
        ({"admission": "greedy"}, "--proxima-admission"),
        ({"evict": "fifo"}, "--proxima-evict"),
        ({"kv_layout": "blocks"}, "--proxima-kv-layout"),
        ({"kv_layout": "paged", "evict": "arc"}, "--proxima-evict arc needs"),
        ({"horizon": -1}, "--proxima-horizon"),
        ({"horizon": True}, "--proxima-horizon"),
        ({"overcommit": 0.9}, "--proxima-overcommit"),
        ({"overcommit": "a lot"}, "--proxima-overcommit"),
        ({"colour": "blue"}, "unknown proxima option(s): colour"),
    ],
)
def test_a_bad_value_names_its_flag(options: dict[str, Any], flag: str) -> None:
    with pytest.raises(ProximaConfigError) as err:
        ProximaConfig.from_dict({"mode": "on", **options})
    assert flag in str(err.value)


def test_environment_defaults_are_checked_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXIMA_MODE", "OFF")
    assert default_mode() == "off"
    monkeypatch.setenv("PROXIMA_MODE", "sometimes")
    with pytest.raises(ProximaConfigError, match=r"\$PROXIMA_MODE"):
        ProximaConfig.from_dict({})
    monkeypatch.setenv("PROXIMA_ATTENTION", "xformers")
    with pytest.raises(ProximaConfigError, match=r"\$PROXIMA_ATTENTION='xformers'"):
        attention_choice()


def test_the_error_is_a_value_error() -> None:
    """Callers that caught ValueError before keep working."""
    assert issubclass(ProximaConfigError, ValueError)


def test_the_runtime_package_defines_one_config_error() -> None:
    """No second exception type for bad configuration anywhere in the runtime package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and "config" in node.name.lower():
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if bases & {"ValueError", "Exception", "RuntimeError", "TypeError"}:
                    found.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.name}")
    assert found == ["config/values.py:ProximaConfigError"]


# --------------------------------------------------------------- what the engine core checks


def _kv_config(*specs: Any) -> Any:
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(kv_cache_spec=s) for s in specs])


def _full(block_size: int = 1, **kw: Any) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=2, head_size=8, dtype=torch.float32, **kw
    )


def test_token_layout_refuses_hybrid_and_sliding_window_models_by_flag() -> None:
    pytest.importorskip("vllm")
    import torch
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    from vllm_proxima.config import check_kv_cache_config

    check_kv_cache_config(_kv_config(_full()), block_size=1)  # one full-attention group
    sliding = SlidingWindowSpec(
        block_size=1, num_kv_heads=2, head_size=8, dtype=torch.float32, sliding_window=64
    )
    for kv_config, message in [
        (_kv_config(_full(), _full()), "one KV cache group; this model has 2"),
        (_kv_config(sliding), "full attention only"),
        (_kv_config(_full(block_size=16)), "needs block size 1, got 16"),
    ]:
        with pytest.raises(ProximaConfigError, match="--proxima-kv-layout token") as err:
            check_kv_cache_config(kv_config, block_size=1)
        assert message in str(err.value)


def test_token_layout_refuses_model_runner_v1_on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    import vllm.platforms

    from vllm_proxima.config import check_model_runner

    gpu = SimpleNamespace(is_cuda_alike=lambda: True)
    monkeypatch.setattr(vllm.platforms, "current_platform", gpu)
    check_model_runner(SimpleNamespace(use_v2_model_runner=True))
    with pytest.raises(ProximaConfigError, match="Model Runner V2") as err:
        check_model_runner(SimpleNamespace(use_v2_model_runner=False))
    assert "--proxima off" in str(err.value)


def test_proxima_engine_args_carry_every_option() -> None:
    pytest.importorskip("vllm")
    from vllm_proxima.api import ProximaEngineArgs

    model = PACKAGE.parents[2] / "models" / "tiny-llama"
    if not (model / "config.json").exists():
        pytest.skip("tiny model not built (python -m proxima_tools.tiny_model)")
    engine_args = ProximaEngineArgs(
        model=str(model),
        proxima="auto",
        proxima_admission="stock",
        proxima_overcommit=0.2,
        proxima_debug_invariants=True,
        proxima_evict="lfu",
        proxima_horizon=16,
        proxima_kv_layout="token",
    )
    options = engine_args.additional_config["proxima"]
    assert ProximaConfig.from_dict(options) == ProximaConfig(
        mode="auto",
        admission="stock",
        overcommit=0.2,
        debug_invariants=True,
        evict="lfu",
        horizon=16,
        kv_layout="token",
    )
