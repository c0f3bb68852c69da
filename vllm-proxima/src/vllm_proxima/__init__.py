"""proxima-vllm: token-granular KV cache management for vLLM 0.26.0.

Public API:
    enable_proxima: proxima options as an ``additional_config`` dict (or merged
        into an ``EngineArgs``).
    ProximaEngineArgs: ``EngineArgs`` with the proxima options as fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from vllm_proxima.api import ProximaEngineArgs


def enable_proxima(engine_args: Any = None, /, **options: Any) -> dict[str, Any]:
    """See :func:`vllm_proxima.engine_args.enable_proxima`."""
    from vllm_proxima.engine_args import enable_proxima as _enable

    return _enable(engine_args, **options)


def __getattr__(name: str) -> Any:
    if name == "ProximaEngineArgs":
        from vllm_proxima.api import ProximaEngineArgs

        return ProximaEngineArgs
    raise AttributeError(name)


__all__ = ["ProximaEngineArgs", "__version__", "enable_proxima"]
