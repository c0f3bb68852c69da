"""The engine-argument hooks: the ``vllm.engine_args_hooks`` entry point.

The engine-args patch (patches/vllm/) loads every object registered in that
entry-point group and calls the functions it has: ``add_cli_args`` registers the
``--proxima*`` flags, ``from_cli_args`` carries their values into
``additional_config["proxima"]`` and ``apply_to_engine_args`` has them checked
(:mod:`vllm_proxima.config`, where every check lives) and sets the engine
arguments proxima mode implies, before any vLLM config is built. With
``--proxima off`` nothing is changed.
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
    KV_LAYOUTS,
    MODES,
    SCHEDULER_CLS,
    ProximaConfig,
    ProximaConfigError,
    attention_choice,
    settle_mode,
)

if TYPE_CHECKING:
    from vllm.engine.arg_utils import EngineArgs

logger = logging.getLogger("vllm.proxima")

# Flag dest -> ProximaConfig field.
_FLAG_FIELDS = {
    "proxima": "mode",
    "proxima_admission": "admission",
    "proxima_overcommit": "overcommit",
    "proxima_horizon": "horizon",
    "proxima_debug_invariants": "debug_invariants",
    "proxima_evict": "evict",
    "proxima_kv_layout": "kv_layout",
}

_announced = False


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """Register the ``--proxima*`` flags on vLLM's engine argument parser."""
    group = parser.add_argument_group(
        "proxima",
        f"proxima-vllm {__version__}: token-granular KV cache management. "
        "On by default where the configuration is supported ('--proxima auto'); "
        "'--proxima off' gives stock vLLM in the same install.",
    )
    group.add_argument(
        "--proxima",
        choices=MODES,
        default=None,
        help="auto (default; or $PROXIMA_MODE): proxima where the configuration is "
        "supported, stock vLLM where it is not (the start line and proxima:mode_info say "
        "which and why); on: projected-peak admission and proxima's KV accounting, "
        "refusing at start what they cannot run; off: upstream vLLM behaviour.",
    )
    group.add_argument(
        "--proxima-kv-layout",
        choices=KV_LAYOUTS,
        default=None,
        help="paged: vLLM's own KV pages, block size and attention backend (the kernels "
        "stock runs); token: a pool of 1-token slots with token-level prefix sharing; "
        "auto (default): the layout measured fastest, paged.",
    )
    group.add_argument(
        "--proxima-admission",
        choices=ADMISSION_POLICIES,
        default=None,
        help="Admission policy for waiting requests (default: adaptive).",
    )
    group.add_argument(
        "--proxima-horizon",
        type=int,
        default=None,
        help="Decode steps ahead the projected peak covers (default 128; 0: the whole "
        "future, never preempting for admitted growth, at the cost of idle KV).",
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
        help="Eviction policy of the token layout's prefix cache (default: lru; lfu or arc "
        "select the token layout under --proxima-kv-layout auto). The cache itself "
        "follows --enable-prefix-caching / --no-enable-prefix-caching.",
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

    ``--proxima auto`` (the default) settles here to ``on``, or to ``off`` where
    proxima mode cannot run the configuration (:func:`vllm_proxima.config.settle_mode`).

    Raises:
        ProximaConfigError: a bad option, or, with ``--proxima on``, a flag or model
            proxima mode cannot honour.
    """
    if engine_args.additional_config is None:
        engine_args.additional_config = {}
    config = ProximaConfig.from_dict(engine_args.additional_config.get(CONFIG_KEY)).resolved()
    model_config = None
    if config.mode == "auto" and config.mode_reason is None:
        model_config = _model_config(engine_args)
    config = settle_mode(config, engine_args, model_config)
    if config.enabled and config.prefix_sharing is None:
        # Prefix caching keeps its stock switch (on by default in vLLM 0.26).
        config = dataclasses.replace(
            config, prefix_sharing=engine_args.enable_prefix_caching is not False
        )
    # Resolved (mode and layout included), so every engine process agrees on it.
    engine_args.additional_config[CONFIG_KEY] = config.to_dict()
    if config.enabled:
        if config.token_layout:
            _apply_token_layout(engine_args)
        engine_args.scheduler_cls = SCHEDULER_CLS
    _announce(config)
    return config


def _apply_token_layout(engine_args: EngineArgs) -> None:
    """1-token pages: block size 1, proxima's backend, its own prefix sharing."""
    attention_choice()  # a bad $PROXIMA_ATTENTION fails here, not in a worker
    engine_args.block_size = 1
    engine_args.enable_prefix_caching = False  # no block hashing: the radix cache shares
    if getattr(engine_args.attention_config, "backend", None) is None:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum

        engine_args.attention_backend = AttentionBackendEnum.CUSTOM


def _model_config(engine_args: EngineArgs) -> Any:
    """vLLM's ``ModelConfig`` for ``auto``'s model checks, or ``None`` where it cannot
    be built (vLLM reports that itself when it builds the config next)."""
    try:
        return engine_args.create_model_config()
    except Exception:  # upstream raises the same error right after
        return None


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
        f" ({mode_account(config)})" if mode_account(config) else "",
    )


def mode_account(config: ProximaConfig) -> str:
    """The start line's parenthesis: the mode's reason and, when on, what runs."""
    if config.enabled:
        auto = "auto: supported; " if config.mode_reason == "supported" else ""
        return auto + describe(config)
    if config.mode_reason in (None, "requested"):
        return ""
    return (
        f"auto: stepped aside for {config.mode_reason}; stock vLLM behaviour "
        "(--proxima on refuses this configuration)"
    )


def describe(config: ProximaConfig) -> str:
    """The start line's account of an enabled configuration: layout, kernel and why."""
    sharing = "on" if config.prefix_sharing else "off"
    if config.token_layout:
        from vllm_proxima.attention import describe_token_backend

        return (
            f"admission={config.admission}, KV layout token: 1-token slots read by "
            f"{describe_token_backend()}, token-level prefix sharing {sharing}"
            f"{', evict=' + config.eviction if config.prefix_sharing else ''}"
        )
    return (
        f"admission={config.admission}, KV layout paged: vLLM's own pages, block size and "
        "attention backend (stock's kernels; 1-token-page kernels measured 0.80-0.90x on "
        f"GQA models), prefix caching {sharing}"
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
