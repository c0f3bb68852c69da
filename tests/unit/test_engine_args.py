"""What proxima mode accepts and refuses at start (vllm_proxima.engine_args, whose checks
are vllm_proxima.config's)."""

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


def test_another_scheduler_class_is_refused_by_flag() -> None:
    with pytest.raises(ProximaConfigError, match="--scheduler-cls my.Scheduler conflicts"):
        apply_to_engine_args(args(scheduler_cls="my.Scheduler"))
    apply_to_engine_args(args(scheduler_cls="vllm.v1.core.sched.scheduler.Scheduler"))


def test_token_layout_settings_are_idempotent() -> None:
    engine_args = args(layout="token")
    apply_to_engine_args(engine_args)
    apply_to_engine_args(engine_args)  # vLLM may build the config twice
    assert engine_args.block_size == 1 and engine_args.enable_prefix_caching is False
    assert str(getattr(engine_args.attention_backend, "name", "")) == "CUSTOM"


# ------------------------------------------------------- the vllm.engine_args_hooks entry point


def _parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return EngineArgs.add_cli_args(FlexibleArgumentParser())


def test_installed_entry_point_adds_and_carries_every_proxima_flag() -> None:
    import importlib.metadata

    hooks = importlib.metadata.entry_points(group="vllm.engine_args_hooks")
    assert [(ep.name, ep.value) for ep in hooks] == [("proxima", "vllm_proxima.engine_args")]
    argv = [
        "--model", str(MODEL), "--proxima", "on", "--proxima-kv-layout", "token",
        "--proxima-admission", "conservative", "--proxima-horizon", "7",
        "--proxima-overcommit", "0.25", "--proxima-evict", "arc", "--proxima-debug-invariants",
    ]  # fmt: skip
    engine_args = EngineArgs.from_cli_args(_parser().parse_args(argv))
    assert engine_args.additional_config["proxima"] == {
        "mode": "on",
        "kv_layout": "token",
        "admission": "conservative",
        "horizon": 7,
        "overcommit": 0.25,
        "evict": "arc",
        "debug_invariants": True,
    }


def test_without_the_entry_point_engine_args_are_upstreams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.metadata

    from vllm.engine import arg_utils

    real = importlib.metadata.entry_points

    def none_for_hooks(**kw: Any) -> Any:
        return () if kw.get("group") == arg_utils.ENGINE_ARGS_HOOKS_GROUP else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", none_for_hooks)
    assert arg_utils.engine_args_hooks("apply_to_engine_args") == []
    parser = _parser()
    assert not any(a.startswith("--proxima") for a in parser._option_string_actions)
    engine_args = EngineArgs.from_cli_args(parser.parse_args(["--model", str(MODEL)]))
    assert engine_args.additional_config in (None, {})


def test_hooks_run_in_entry_point_name_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata
    from types import SimpleNamespace

    from vllm.engine import arg_utils

    calls: list[str] = []

    class _EntryPoint:
        def __init__(self, name: str, hook: Any) -> None:
            self.name, self._hook = name, hook

        def load(self) -> Any:
            return self._hook

    hooks = [
        _EntryPoint("b", SimpleNamespace(apply_to_engine_args=lambda e: calls.append("b"))),
        _EntryPoint("a", SimpleNamespace(apply_to_engine_args=lambda e: calls.append("a"))),
        _EntryPoint("c", SimpleNamespace()),  # defines none of the three: skipped
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: hooks)
    for hook in arg_utils.engine_args_hooks("apply_to_engine_args"):
        hook(None)
    assert calls == ["a", "b"]


# ------------------------------------------------------------------ --proxima auto (the default)


def test_default_mode_is_auto_and_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_proxima.config import ProximaConfig

    monkeypatch.delenv("PROXIMA_MODE", raising=False)
    assert ProximaConfig.from_dict({}).mode == "auto"
    monkeypatch.setenv("PROXIMA_MODE", "on")
    assert ProximaConfig.from_dict({}).mode == "on"


def test_auto_runs_proxima_where_supported() -> None:
    engine_args = args("auto")
    config = apply_to_engine_args(engine_args)
    assert (config.mode, config.mode_reason) == ("on", "supported")
    assert engine_args.scheduler_cls == SCHEDULER_CLS
    assert engine_args.additional_config["proxima"]["mode"] == "on"  # what every process sees


STEP_ASIDE = [
    (None, {"scheduler_cls": "my.Scheduler"}, "--scheduler-cls"),
    (None, {"decode_context_parallel_size": 2}, "context parallelism"),
    ("token", {"speculative_config": {"method": "ngram"}}, "speculative decoding"),
    (
        "token",
        {"kv_transfer_config": {"kv_connector": "ExampleConnector", "kv_role": "kv_both"}},
        "KV connectors",
    ),
    ("token", {"enable_expert_parallel": True}, "expert parallelism"),
    ("token", {"kv_cache_dtype": "fp8"}, "--kv-cache-dtype fp8"),
    ("token", {"block_size": 16}, "--block-size 16"),
    ("token", {"attention_backend": "FLASH_ATTN"}, "--attention-backend FLASH_ATTN"),
]


@pytest.mark.parametrize(("layout", "kw", "reason"), STEP_ASIDE)
def test_auto_steps_aside_where_proxima_would_refuse(
    layout: str | None, kw: dict[str, Any], reason: str
) -> None:
    engine_args = args("auto", layout, **kw)
    before = {k: getattr(engine_args, k) for k in ("block_size", "scheduler_cls")}
    config = apply_to_engine_args(engine_args)
    assert config.mode == "off" and reason in (config.mode_reason or "")
    assert engine_args.additional_config["proxima"]["mode"] == "off"
    assert {k: getattr(engine_args, k) for k in before} == before  # stock's flags, untouched
    with pytest.raises(ProximaConfigError, match="--proxima off"):
        apply_to_engine_args(args("on", layout, **kw))  # explicit on still refuses


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ({"sliding_window": 4096}, "a sliding-window model"),
        ({"layer_types": ["sliding_attention", "full_attention"]}, "a sliding-window model"),
        ({"is_hybrid": True}, "a hybrid model"),
        ({"is_encoder_decoder": True}, "an encoder-decoder model"),
    ],
)
def test_auto_steps_aside_for_models_the_token_layout_cannot_run(
    monkeypatch: pytest.MonkeyPatch, model: dict[str, Any], reason: str
) -> None:
    from types import SimpleNamespace

    fake = SimpleNamespace(
        is_hybrid=model.get("is_hybrid", False),
        is_encoder_decoder=model.get("is_encoder_decoder", False),
        hf_text_config=SimpleNamespace(layer_types=model.get("layer_types")),
        get_sliding_window=lambda: model.get("sliding_window"),
    )
    monkeypatch.setattr(EngineArgs, "create_model_config", lambda self: fake)
    engine_args = args("auto", "token")
    config = apply_to_engine_args(engine_args)
    assert (config.mode, config.mode_reason) == ("off", f"{reason} (KV layout token)")
    assert engine_args.block_size is None  # stock's KV layout
    # The paged layout runs these models (admission left to vLLM where it cannot project);
    # auto leaves sliding-window ones to stock: measured slower than stock on bursts.
    paged = apply_to_engine_args(args("auto", "paged"))
    if reason == "a sliding-window model":
        assert (paged.mode, paged.mode_reason) == (
            "off",
            "a sliding-window model (measured slower than stock on bursts)",
        )
        on = apply_to_engine_args(args("on", "paged"))  # explicit on runs them
        assert (on.mode, on.mode_reason) == ("on", "requested")
    else:
        assert paged.mode == "on"


def test_auto_runs_full_attention_models_in_the_paged_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    fake = SimpleNamespace(
        is_hybrid=False,
        is_encoder_decoder=False,
        hf_text_config=SimpleNamespace(layer_types=["full_attention"] * 2),
        get_sliding_window=lambda: None,
    )
    monkeypatch.setattr(EngineArgs, "create_model_config", lambda self: fake)
    config = apply_to_engine_args(args("auto", "paged"))
    assert (config.mode, config.mode_reason) == ("on", "supported")


def test_auto_leaves_speculative_decoding_to_stock_and_on_runs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured no faster than stock on bursts (h200-dropin-2026-12-04, h100-profile-2026-12-05):
    ``auto`` steps aside, an explicit ``on`` runs it in the paged layout."""
    from types import SimpleNamespace

    fake = SimpleNamespace(
        is_hybrid=False,
        is_encoder_decoder=False,
        hf_text_config=SimpleNamespace(layer_types=None),
        get_sliding_window=lambda: None,
    )
    monkeypatch.setattr(EngineArgs, "create_model_config", lambda self: fake)
    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    engine_args = args("auto", "paged", speculative_config=ngram)
    config = apply_to_engine_args(engine_args)
    assert (config.mode, config.mode_reason) == (
        "off",
        "speculative decoding (measured no faster than stock)",
    )
    assert engine_args.scheduler_cls != SCHEDULER_CLS  # stock's scheduler
    assert engine_args.speculative_config == ngram
    on = apply_to_engine_args(args("on", "paged", speculative_config=ngram))
    assert (on.mode, on.mode_reason) == ("on", "requested")
    # without speculative decoding the same model runs proxima under auto
    assert apply_to_engine_args(args("auto", "paged")).mode == "on"

    # an engine argument: decided without the model config (vLLM reports a bad model itself)
    def no_model(self: EngineArgs) -> None:
        raise ValueError("no model config here")

    monkeypatch.setattr(EngineArgs, "create_model_config", no_model)
    blind = apply_to_engine_args(args("auto", "paged", speculative_config=ngram))
    assert (blind.mode, blind.mode_reason) == (config.mode, config.mode_reason)


def test_auto_keeps_refusing_bad_values() -> None:
    with pytest.raises(ProximaConfigError, match="--proxima-horizon"):
        apply_to_engine_args(
            EngineArgs(model=str(MODEL), additional_config={"proxima": {"horizon": -1}})
        )


def test_a_settled_config_is_still_checked() -> None:
    """A settled dict copied into new engine arguments cannot smuggle in a conflict."""
    settled = {"mode": "on", "mode_reason": "supported", "kv_layout": "token"}
    engine_args = EngineArgs(
        model=str(MODEL), additional_config={"proxima": settled}, block_size=16
    )
    with pytest.raises(ProximaConfigError, match="--block-size 16 conflicts"):
        apply_to_engine_args(engine_args)
