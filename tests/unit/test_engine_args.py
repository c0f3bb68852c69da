"""What proxima mode accepts and refuses at start (vllm_proxima.engine_args)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from vllm.engine.arg_utils import EngineArgs  # noqa: E402

from vllm_proxima.config import ProximaConfigError  # noqa: E402
from vllm_proxima.engine_args import SCHEDULER_CLS, apply_to_engine_args  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (proxima_tools.tiny_model)"
)


def args(proxima: str = "on", layout: str | None = None, **kw: Any) -> EngineArgs:
    options: dict[str, Any] = {"mode": proxima}
    if layout is not None:
        options["kv_layout"] = layout
    return EngineArgs(model=str(MODEL), additional_config={"proxima": options}, **kw)


@pytest.mark.parametrize(
    "parallel",
    [
        {"tensor_parallel_size": 2},
        {"pipeline_parallel_size": 2},
        {"data_parallel_size": 2},
        {"tensor_parallel_size": 2, "distributed_executor_backend": "ray"},
        {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "data_parallel_size": 2},
    ],
)
@pytest.mark.parametrize("layout", ["paged", "token"])
def test_tensor_pipeline_data_parallel_and_ray_are_accepted(
    parallel: dict[str, Any], layout: str
) -> None:
    engine_args = args(layout=layout, **parallel)
    config = apply_to_engine_args(engine_args)
    assert config.enabled and config.kv_layout == layout
    assert engine_args.scheduler_cls == SCHEDULER_CLS
    assert engine_args.block_size == (1 if layout == "token" else None)
    for key, value in parallel.items():
        assert getattr(engine_args, key) == value  # left to vLLM's own machinery


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"enable_expert_parallel": True}, "expert parallelism"),
        ({"enable_eplb": True}, "expert parallelism"),
        ({"decode_context_parallel_size": 2}, "context parallelism"),
        ({"prefill_context_parallel_size": 2}, "context parallelism"),
        ({"kv_cache_dtype": "fp8"}, "--kv-cache-dtype fp8"),
        ({"speculative_config": {"method": "ngram"}}, "speculative decoding"),
        ({"block_size": 16}, "--block-size 16 conflicts with --proxima-kv-layout token"),
        ({"attention_backend": "FLASH_ATTN"}, "conflicts with --proxima-kv-layout token"),
    ],
)
def test_token_layout_refuses_what_it_lacks_with_the_way_out(
    kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProximaConfigError, match="proxima") as err:
        apply_to_engine_args(args(layout="token", **kw))
    assert message in str(err.value) and "--proxima off" in str(err.value)
    assert "--proxima-kv-layout paged" in str(err.value)


@pytest.mark.parametrize(
    "kw",
    [
        {"enable_expert_parallel": True},
        {"kv_cache_dtype": "fp8"},
        {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
        {"block_size": 32},
        {"attention_backend": "TRITON_ATTN"},
        {"enable_prefix_caching": False},
    ],
)
def test_paged_layout_leaves_vllms_own_flags_alone(kw: dict[str, Any]) -> None:
    """The default layout runs vLLM's KV manager and kernels: their flags stay vLLM's."""
    engine_args = args(**kw)
    config = apply_to_engine_args(engine_args)
    assert config.kv_layout == "paged" and engine_args.scheduler_cls == SCHEDULER_CLS
    for key, value in kw.items():
        assert getattr(engine_args, key) == value
    assert config.prefix_sharing is (kw.get("enable_prefix_caching") is not False)


def test_paged_layout_refuses_context_parallelism() -> None:
    with pytest.raises(ProximaConfigError, match="context parallelism") as err:
        apply_to_engine_args(args(decode_context_parallel_size=2))
    assert "--proxima off" in str(err.value)


@pytest.mark.parametrize(
    ("options", "layout"),
    [({}, "paged"), ({"evict": "lru"}, "paged"), ({"evict": "arc"}, "token")],
)
def test_auto_layout_resolves_once_for_every_process(options: dict[str, Any], layout: str) -> None:
    engine_args = EngineArgs(
        model=str(MODEL), additional_config={"proxima": {"mode": "on", **options}}
    )
    assert apply_to_engine_args(engine_args).kv_layout == layout
    assert engine_args.additional_config["proxima"]["kv_layout"] == layout
    apply_to_engine_args(engine_args)  # idempotent
    assert engine_args.additional_config["proxima"]["kv_layout"] == layout


def test_lfu_eviction_with_the_paged_layout_is_refused() -> None:
    with pytest.raises(ProximaConfigError, match="needs --proxima-kv-layout token"):
        apply_to_engine_args(
            EngineArgs(
                model=str(MODEL),
                additional_config={"proxima": {"kv_layout": "paged", "evict": "lfu"}},
            )
        )


def test_proxima_off_leaves_every_flag_to_vllm() -> None:
    engine_args = args("off", enable_expert_parallel=True, block_size=16)
    assert not apply_to_engine_args(engine_args).enabled
    assert engine_args.block_size == 16 and engine_args.scheduler_cls != SCHEDULER_CLS
