"""proxima's configuration: every ``--proxima*`` option, validated in this package and
nowhere else, with one error type, :class:`ProximaConfigError`, whose message names the flag
(or environment variable) at fault and the way out.

* :mod:`~vllm_proxima.config.values`: :class:`ProximaConfig`, each value, ``$PROXIMA_MODE`` and
  ``$PROXIMA_ATTENTION``;
* :mod:`~vllm_proxima.config.checks`: the combinations with vLLM's own flags the chosen KV
  layout cannot run (at start, before any vLLM config is built), ``--proxima auto``'s settling,
  and what only the engine core knows (the model's KV cache groups, the model runner).
"""

from vllm_proxima.config.checks import (
    Conflict,
    check_engine_args,
    check_kv_cache_config,
    check_model_runner,
    engine_args_conflict,
    model_conflict,
    settle_mode,
)
from vllm_proxima.config.values import (
    ADMISSION_POLICIES,
    ATTENTION_CHOICES,
    ATTENTION_ENV,
    CONFIG_KEY,
    DEFAULT_MODE,
    EVICTION_POLICIES,
    KV_LAYOUTS,
    MODE_ENV,
    MODES,
    SCHEDULER_CLS,
    ProximaConfig,
    ProximaConfigError,
    attention_choice,
    default_mode,
    resolve_kv_layout,
)

__all__ = [
    "ADMISSION_POLICIES",
    "ATTENTION_CHOICES",
    "ATTENTION_ENV",
    "CONFIG_KEY",
    "Conflict",
    "DEFAULT_MODE",
    "EVICTION_POLICIES",
    "KV_LAYOUTS",
    "MODES",
    "MODE_ENV",
    "ProximaConfig",
    "ProximaConfigError",
    "SCHEDULER_CLS",
    "attention_choice",
    "check_engine_args",
    "check_kv_cache_config",
    "check_model_runner",
    "default_mode",
    "engine_args_conflict",
    "model_conflict",
    "resolve_kv_layout",
    "settle_mode",
]
