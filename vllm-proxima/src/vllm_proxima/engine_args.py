"""The engine-argument hooks the patch series calls (see patches/vllm/).

``add_cli_args`` registers the ``--proxima*`` flags, ``from_cli_args`` carries
their values into ``additional_config["proxima"]`` and ``apply_to_engine_args``
validates them and sets the engine arguments proxima mode implies, before any
vLLM config is built. With ``--proxima off`` nothing is changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from vllm_proxima import __version__
from vllm_proxima.config import (
    ADMISSION_POLICIES,
    CONFIG_KEY,
    EVICTION_POLICIES,
    MODES,
    ProximaConfig,
    ProximaConfigError,
)

if TYPE_CHECKING:
    from vllm.engine.arg_utils import EngineArgs

logger = logging.getLogger("vllm.proxima")

SCHEDULER_CLS = "vllm_proxima.scheduling.scheduler.proxima_scheduler"

# Flag dest -> ProximaConfig field.
_FLAG_FIELDS = {
    "proxima": "mode",
    "proxima_admission": "admission",
    "proxima_overcommit": "overcommit",
    "proxima_debug_invariants": "debug_invariants",
    "proxima_evict": "evict",
}

_announced = False


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """Register the ``--proxima*`` flags on vLLM's engine argument parser."""
    group = parser.add_argument_group(
        "proxima",
        f"proxima-vllm {__version__}: token-granular KV cache management. "
        "On by default; '--proxima off' gives stock vLLM in the same install.",
    )
    group.add_argument(
        "--proxima",
        choices=MODES,
        default=None,
        help="Token-granular KV cache manager on (default; or $PROXIMA_MODE) "
        "or off (upstream vLLM behaviour).",
    )
    group.add_argument(
        "--proxima-admission",
        choices=ADMISSION_POLICIES,
        default=None,
        help="Admission policy for waiting requests (default: adaptive).",
    )
    group.add_argument(
        "--proxima-overcommit",
        type=float,
        default=None,
        help="For the adaptive policy: how far (0.0-0.5, a fraction of the KV "
        "pool) the projected peak may exceed the pool (default 0.0).",
    )
    group.add_argument(
        "--proxima-evict",
        choices=EVICTION_POLICIES,
        default=None,
        help="Eviction policy of the token-level prefix cache (default: lru). The cache "
        "itself follows --enable-prefix-caching / --no-enable-prefix-caching.",
    )
    group.add_argument(
        "--proxima-debug-invariants",
        action="store_true",
        default=None,
        help="Check the slot pool's invariants after every change (slow).",
    )


def from_cli_args(args: argparse.Namespace, engine_args: EngineArgs) -> None:
    """Copy parsed ``--proxima*`` values into ``engine_args.additional_config``."""
    options = {
        field: getattr(args, dest)
        for dest, field in _FLAG_FIELDS.items()
        if getattr(args, dest, None) is not None
    }
    if options:
        merge_options(engine_args, options)


def merge_options(engine_args: EngineArgs, options: dict[str, Any]) -> None:
    """Merge proxima options into ``engine_args.additional_config``."""
    if engine_args.additional_config is None:
        engine_args.additional_config = {}
    current = dict(engine_args.additional_config.get(CONFIG_KEY) or {})
    current.update(options)
    engine_args.additional_config[CONFIG_KEY] = current


def apply_to_engine_args(engine_args: EngineArgs) -> ProximaConfig:
    """Validate the proxima options and set the engine arguments they imply.

    Idempotent: vLLM may build the config more than once from one EngineArgs.

    Raises:
        ProximaConfigError: a bad option, or a flag proxima mode cannot honour.
    """
    if engine_args.additional_config is None:
        engine_args.additional_config = {}
    config = ProximaConfig.from_dict(engine_args.additional_config.get(CONFIG_KEY))
    if config.enabled and config.prefix_sharing is None:
        # Prefix caching keeps its stock switch (on by default in vLLM 0.26); proxima
        # serves it with token-level sharing, so vLLM's block hashing stays off.
        config = dataclasses.replace(
            config, prefix_sharing=engine_args.enable_prefix_caching is not False
        )
    # Resolved (mode included), so every engine process agrees on it.
    engine_args.additional_config[CONFIG_KEY] = config.to_dict()
    _announce(config)
    if not config.enabled:
        return config

    _check_supported(engine_args)
    if engine_args.block_size not in (None, 1):
        raise ProximaConfigError(
            f"--block-size {engine_args.block_size} conflicts with proxima mode, "
            "which manages the KV cache in 1-token pages; omit --block-size or "
            "use --proxima off"
        )
    engine_args.block_size = 1

    engine_args.enable_prefix_caching = False  # no block hashing: the radix cache shares

    _select_attention_backend(engine_args)

    scheduler_cls = engine_args.scheduler_cls
    if scheduler_cls not in (None, SCHEDULER_CLS) and not _is_default_scheduler(scheduler_cls):
        raise ProximaConfigError(
            f"--scheduler-cls {scheduler_cls} conflicts with proxima mode, "
            f"which uses {SCHEDULER_CLS}; use --proxima off to run another "
            "scheduler"
        )
    engine_args.scheduler_cls = SCHEDULER_CLS
    return config


def _announce(config: ProximaConfig) -> None:
    global _announced
    if _announced:
        return
    _announced = True
    import vllm

    logger.info(
        "proxima-vllm %s on vLLM %s: proxima %s%s",
        __version__,
        vllm.__version__,
        config.mode,
        (
            f" (admission={config.admission}, prefix sharing "
            f"{'on, evict=' + config.evict if config.prefix_sharing else 'off'})"
        )
        if config.enabled
        else "",
    )


def _check_supported(engine_args: EngineArgs) -> None:
    """Refuse, at start, the features proxima mode does not support yet."""
    unsupported: list[str] = []
    if engine_args.kv_transfer_config is not None:
        unsupported.append("KV connectors / KV offload (--kv-transfer-config)")
    if engine_args.speculative_config:
        unsupported.append("speculative decoding (--speculative-config)")
    if (engine_args.decode_context_parallel_size or 1) > 1 or (
        engine_args.prefill_context_parallel_size or 1
    ) > 1:
        unsupported.append("context parallelism")
    if engine_args.enable_expert_parallel or engine_args.enable_eplb:
        # Not for a reason of principle (MoE experts hold no KV): untested so far, and
        # most MoE models run on Model Runner V1, which proxima refuses on GPU anyway.
        unsupported.append("expert parallelism (--enable-expert-parallel, --enable-eplb)")
    if engine_args.kv_cache_dtype not in (None, "auto"):
        unsupported.append(f"--kv-cache-dtype {engine_args.kv_cache_dtype}")
    if unsupported:
        raise ProximaConfigError(
            "proxima mode does not support yet: "
            + "; ".join(unsupported)
            + ". Use --proxima off for these."
        )


def _select_attention_backend(engine_args: EngineArgs) -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    custom = AttentionBackendEnum.CUSTOM
    chosen = engine_args.attention_backend
    config_backend = getattr(engine_args.attention_config, "backend", None)
    for name, value in (
        ("--attention-backend", chosen),
        ("--attention-config.backend", config_backend),
    ):
        if value is not None and str(getattr(value, "name", value)).upper() not in (
            custom.name,
            "AUTO",
        ):
            raise ProximaConfigError(
                f"{name} {getattr(value, 'name', value)} conflicts with proxima "
                "mode, which brings its own backend for 1-token pages (Triton "
                "on GPU, torch on CPU); use --proxima off to choose another"
            )
    if config_backend is None:
        engine_args.attention_backend = custom


def _is_default_scheduler(scheduler_cls: object) -> bool:
    from vllm.v1.core.sched.scheduler import Scheduler

    return scheduler_cls is Scheduler or scheduler_cls in (
        "vllm.v1.core.sched.scheduler.Scheduler",
    )


def enable_proxima(engine_args: EngineArgs | None = None, /, **options: Any) -> dict[str, Any]:
    """Turn proxima mode on (or configure it) programmatically.

    Args:
        engine_args: if given, the options are merged into its
            ``additional_config``.
        **options: ProximaConfig fields (``mode``, ``admission``, ...).

    Returns:
        An ``additional_config`` dict, e.g. for
        ``LLM(model, additional_config=enable_proxima(admission="conservative"))``.
    """
    options.setdefault("mode", "on")
    config = ProximaConfig.from_dict(options)  # validates
    if engine_args is not None:
        merge_options(engine_args, config.to_dict())
    return {CONFIG_KEY: config.to_dict()}


__all__ = [
    "ProximaConfigError",
    "add_cli_args",
    "apply_to_engine_args",
    "enable_proxima",
    "from_cli_args",
]
