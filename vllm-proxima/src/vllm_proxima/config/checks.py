"""The checks of proxima's configuration against vLLM's: flags, model, KV cache, model runner.

The second half of :mod:`vllm_proxima.config` (values are checked in
:mod:`~vllm_proxima.config.values`); the same error type, :class:`ProximaConfigError`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_proxima.config.values import SCHEDULER_CLS, ProximaConfig, ProximaConfigError

if TYPE_CHECKING:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.kv_cache_interface import KVCacheConfig


# --------------------------------------------------------------------------- vLLM's flags


@dataclass(slots=True, frozen=True)
class Conflict:
    """A configuration proxima mode cannot run.

    Attributes:
        reason: what it cannot run, short (the ``reason`` label of
            ``proxima:mode_info`` when ``auto`` steps aside).
        message: the error ``--proxima on`` raises: the flag and the way out.
    """

    reason: str
    message: str


def settle_mode(
    config: ProximaConfig, engine_args: EngineArgs, model_config: Any = None
) -> ProximaConfig:
    """``auto`` settled to ``on`` or ``off``, with the reason; ``on`` checked.

    Args:
        config: the config with its KV layout resolved.
        engine_args: vLLM's engine arguments, before any config is built from them.
        model_config: vLLM's ``ModelConfig`` for the model checks of the token layout
            under ``auto`` (``None``: not checked here; the engine core checks).

    Raises:
        ProximaConfigError: ``--proxima on`` with a configuration it cannot run.
    """
    if config.mode_reason is not None:  # settled already (vLLM may build the config twice)
        if config.enabled:
            check_engine_args(config, engine_args)  # what proxima set itself never conflicts
        return config
    if config.mode == "off":
        return dataclasses.replace(config, mode_reason="requested")
    as_on = dataclasses.replace(config, mode="on")
    conflict = engine_args_conflict(as_on, engine_args)
    if conflict is None and config.mode == "auto":
        if model_config is not None:
            conflict = model_conflict(as_on, model_config)
        conflict = conflict or auto_leaves_to_stock(as_on, engine_args, model_config)
    if config.mode == "on":
        if conflict is not None:
            raise ProximaConfigError(conflict.message)
        return dataclasses.replace(config, mode_reason="requested")
    if conflict is not None:
        return dataclasses.replace(config, mode="off", mode_reason=conflict.reason)
    return dataclasses.replace(as_on, mode_reason="supported")


def check_engine_args(config: ProximaConfig, engine_args: EngineArgs) -> None:
    """Refuse, at start, the vLLM flags the resolved configuration cannot honour.

    Args:
        config: the resolved config (``kv_layout`` not ``auto``).
        engine_args: vLLM's engine arguments, before any config is built from them.

    Raises:
        ProximaConfigError: the first conflict found, naming the flag and the way out.
    """
    conflict = engine_args_conflict(config, engine_args)
    if conflict is not None:
        raise ProximaConfigError(conflict.message)


def engine_args_conflict(config: ProximaConfig, engine_args: EngineArgs) -> Conflict | None:
    """Why proxima mode cannot run with these engine arguments, or ``None``.

    The paged layout runs upstream's KV manager and kernels, so it refuses only what
    the admission's projection does not model; the token layout refuses every feature
    its own manager and backends lack.
    """
    if not config.enabled:
        return None
    scheduler_cls = engine_args.scheduler_cls
    if scheduler_cls not in (None, SCHEDULER_CLS) and not _is_default_scheduler(scheduler_cls):
        return Conflict(
            "--scheduler-cls",
            f"--scheduler-cls {scheduler_cls} conflicts with proxima mode, "
            f"which uses {SCHEDULER_CLS}; use --proxima off to run another "
            "scheduler",
        )
    paged = not config.token_layout
    unsupported = _unsupported_features(engine_args, paged)
    if unsupported:
        layout = "paged" if paged else "token"
        return Conflict(
            "; ".join(unsupported) + ("" if paged else " (KV layout token)"),
            f"proxima mode (KV layout {layout}) does not support yet: "
            + "; ".join(unsupported)
            + ". Use --proxima off for these"
            + ("." if paged else ", or --proxima-kv-layout paged."),
        )
    if paged:
        return None
    if engine_args.block_size not in (None, 1):
        return Conflict(
            f"--block-size {engine_args.block_size} (KV layout token)",
            f"--block-size {engine_args.block_size} conflicts with --proxima-kv-layout "
            "token, which manages the KV cache in 1-token pages; omit --block-size, use "
            "--proxima-kv-layout paged, or --proxima off",
        )
    return _attention_backend_conflict(engine_args)


def _unsupported_features(engine_args: EngineArgs, paged: bool) -> list[str]:
    unsupported: list[str] = []
    if not paged and engine_args.kv_transfer_config is not None:
        unsupported.append("KV connectors / KV offload (--kv-transfer-config)")
    if not paged and engine_args.speculative_config:
        unsupported.append("speculative decoding (--speculative-config)")
    if (engine_args.decode_context_parallel_size or 1) > 1 or (
        engine_args.prefill_context_parallel_size or 1
    ) > 1:
        unsupported.append("context parallelism")
    if not paged and (engine_args.enable_expert_parallel or engine_args.enable_eplb):
        # MoE experts hold no KV, but most MoE models run on Model Runner V1, which
        # the token layout refuses on GPU (its block table is max_model_len wide).
        unsupported.append("expert parallelism (--enable-expert-parallel, --enable-eplb)")
    if not paged and engine_args.kv_cache_dtype not in (None, "auto"):
        unsupported.append(f"--kv-cache-dtype {engine_args.kv_cache_dtype}")
    return unsupported


def _attention_backend_conflict(engine_args: EngineArgs) -> Conflict | None:
    """The token layout brings its own backend: another one named is a conflict."""
    config_backend = getattr(engine_args.attention_config, "backend", None)
    for name, value in (
        ("--attention-backend", engine_args.attention_backend),
        ("--attention-config.backend", config_backend),
    ):
        if value is not None and str(getattr(value, "name", value)).upper() not in (
            "CUSTOM",
            "AUTO",
        ):
            shown = getattr(value, "name", value)
            return Conflict(
                f"{name} {shown} (KV layout token)",
                f"{name} {shown} conflicts with "
                "--proxima-kv-layout token, which brings its own backend for 1-token "
                "pages (Triton or FlashAttention on GPU, torch on CPU); use "
                "--proxima-kv-layout paged or --proxima off to choose another",
            )
    return None


def _is_default_scheduler(scheduler_cls: object) -> bool:
    from vllm.v1.core.sched.scheduler import Scheduler

    return scheduler_cls is Scheduler or scheduler_cls in (
        "vllm.v1.core.sched.scheduler.Scheduler",
    )


def model_conflict(config: ProximaConfig, model_config: Any) -> Conflict | None:
    """What the token layout cannot run about the model, known from its config.

    The engine core finds the same from the KV cache groups
    (:func:`check_kv_cache_config`), but only once the KV cache is being built, too
    late to run the model the stock way; ``auto`` asks here, before.
    """
    if not config.enabled or not config.token_layout:
        return None
    if getattr(model_config, "is_hybrid", False):
        what = "a hybrid model"
    elif _has_sliding_window(model_config):
        what = "a sliding-window model"
    elif getattr(model_config, "is_encoder_decoder", False):
        what = "an encoder-decoder model"
    else:
        return None
    return Conflict(
        f"{what} (KV layout token)",
        f"proxima mode (--proxima-kv-layout token) does not support {what} (its KV cache "
        "is not one full-attention group). Use --proxima-kv-layout paged or --proxima off.",
    )


def auto_leaves_to_stock(
    config: ProximaConfig, engine_args: EngineArgs, model_config: Any = None
) -> Conflict | None:
    """What ``auto`` leaves to stock although proxima mode runs it: configurations where
    proxima was measured slower than stock, or no faster with repeats below it (a drop-in
    must never make a server slower). ``--proxima on`` runs them.

    Speculative decoding in the paged layout: n-gram on the Llama-3-8B shape ran 0.913-1.102x
    stock on a 1,000-request burst over five repeats on one H200, and 0.932-1.243x at
    client concurrency 32 (docs/benchmarks/h200-dropin-2026-12-04); with the current code
    one H100 ran the burst at 0.952 and 0.988x (docs/benchmarks/h100-profile-2026-12-05).
    With the drafts counted and the residents read every step, five more H100 bursts ran
    0.913-1.063x (mean 0.984) with no preemption against stock's 99-125
    (docs/benchmarks/h100-spec-tight-2026-12-07): fewer preemptions did not turn into
    throughput. Lift this once the H200 burst and c32 measure at or above stock.

    Sliding-window models in the paged layout: on one H200 (Llama-3-8B shape, alternating
    sliding/full layers, window 128; docs/benchmarks/h200-dropin-2026-12-04) proxima ran
    0.97-1.03x stock at client concurrency 32 but 0.79-0.995x on a 1,000-request burst
    (five repeats, all below 1.0): the engine is CPU-bound there and proxima's scheduler
    took ~1.6-2 ms a step more (the window bounds' admission). With the reading kept
    across steps and the demand curve, one H100 ran the same shape's burst at 1.006 and
    1.104x with ``--proxima on`` (docs/benchmarks/h100-bursts-2026-12-05): two repeats on
    another machine. Lift this once the H200 burst measures at or above stock.
    """
    if not config.enabled or config.token_layout:
        return None
    if engine_args.speculative_config:  # an engine argument: no model config needed
        return Conflict(
            "speculative decoding (measured no faster than stock)",
            "proxima mode runs speculative decoding (--proxima on), but --proxima auto "
            "leaves it to vLLM's own scheduler: on bursts it measured no faster than stock.",
        )
    if model_config is None or not _has_sliding_window(model_config):
        return None
    return Conflict(
        "a sliding-window model (measured slower than stock on bursts)",
        "proxima mode runs sliding-window models (--proxima on), but --proxima auto leaves "
        "them to vLLM's own scheduler: on a burst they measured slower than stock.",
    )


def _has_sliding_window(model_config: Any) -> bool:
    hf_config = getattr(model_config, "hf_text_config", None)
    layer_types = getattr(hf_config, "layer_types", None) or ()
    return bool(model_config.get_sliding_window() or "sliding_attention" in layer_types)


# --------------------------------------------------------------------------- the engine core


def check_kv_cache_config(kv_cache_config: KVCacheConfig, block_size: int) -> None:
    """The token layout runs one full-attention KV cache group of 1-token pages.

    Raises:
        ProximaConfigError: the model's KV cache is not one full-attention group,
            or the engine config was not prepared by ``vllm_proxima.engine_args``.
    """
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    way_out = "Use --proxima-kv-layout paged or --proxima off."
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ProximaConfigError(
            f"proxima mode (--proxima-kv-layout token) supports models with one KV cache "
            f"group; this model has {len(groups)} (hybrid, sliding-window or "
            f"cross-attention layers). {way_out}"
        )
    spec = groups[0].kv_cache_spec
    if not isinstance(spec, FullAttentionSpec) or isinstance(spec, SlidingWindowSpec):
        raise ProximaConfigError(
            "proxima mode (--proxima-kv-layout token) supports full attention only; this "
            f"model's KV cache is {type(spec).__name__}. {way_out}"
        )
    if getattr(spec, "sliding_window", None):
        raise ProximaConfigError(
            "proxima mode (--proxima-kv-layout token) does not support sliding-window "
            f"attention yet. {way_out}"
        )
    if spec.block_size != 1 or block_size != 1:
        raise ProximaConfigError(
            f"proxima mode (--proxima-kv-layout token) needs block size 1, got "
            f"{spec.block_size}: the engine config was not prepared by "
            "vllm_proxima.engine_args"
        )


def check_model_runner(vllm_config: Any) -> None:
    """Model Runner V1 copies the whole block table to the GPU every step; with
    1-token pages that table is ``max_model_len`` wide, so the token layout refuses
    it on GPUs.

    Raises:
        ProximaConfigError: a GPU model on Model Runner V1.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike() and not getattr(vllm_config, "use_v2_model_runner", False):
        raise ProximaConfigError(
            "proxima mode (--proxima-kv-layout token) on GPU needs vLLM's Model Runner V2 "
            "(it stages only new block-table entries); this model/config runs on Model "
            "Runner V1 (MoE, hybrid or a feature V2 lacks). Use --proxima-kv-layout paged "
            "or --proxima off."
        )
