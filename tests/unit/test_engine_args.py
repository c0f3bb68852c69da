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
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/tiny_model.py)"
)


def args(proxima: str = "on", **kw: Any) -> EngineArgs:
    return EngineArgs(model=str(MODEL), additional_config={"proxima": {"mode": proxima}}, **kw)


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
def test_tensor_pipeline_data_parallel_and_ray_are_accepted(parallel: dict[str, Any]) -> None:
    engine_args = args(**parallel)
    config = apply_to_engine_args(engine_args)
    assert config.enabled
    assert engine_args.block_size == 1 and engine_args.scheduler_cls == SCHEDULER_CLS
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
        ({"block_size": 16}, "--block-size 16 conflicts with proxima mode"),
    ],
)
def test_unsupported_combinations_are_refused_with_the_way_out(
    kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProximaConfigError, match="proxima") as err:
        apply_to_engine_args(args(**kw))
    assert message in str(err.value) and "--proxima off" in str(err.value)


def test_proxima_off_leaves_every_flag_to_vllm() -> None:
    engine_args = args("off", enable_expert_parallel=True, block_size=16)
    assert not apply_to_engine_args(engine_args).enabled
    assert engine_args.block_size == 16 and engine_args.scheduler_cls != SCHEDULER_CLS
