"""proxima-vllm: token-granular KV cache management for vLLM 0.26.0.

Public API:
    enable_proxima: proxima options as an ``additional_config`` dict (or merged
        into an ``EngineArgs``).
    ProximaEngineArgs: ``EngineArgs`` with the proxima options as fields.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

UNKNOWN_VERSION = "0+unknown"


def _read_version() -> str:
    """proxima-vllm's version. The repository's ``VERSION`` file is its one source.

    In a source checkout it is read from that file. Installed, the package ships
    inside the patched ``vllm`` wheel, whose version the wheel builder stamps as
    ``<vLLM>+proxima.<VERSION>`` (``...+proxima.<VERSION>.cpu`` for the CPU
    wheel), so it is read back from the distribution's version. ``0+unknown``
    when neither is there (the package copied into a stock vLLM install).
    """
    package = Path(__file__).resolve().parent
    checkout = package.parents[1]  # vllm-proxima/src/vllm_proxima -> vllm-proxima
    if checkout.name == "vllm-proxima" and (checkout.parent / "VERSION").is_file():
        return (checkout.parent / "VERSION").read_text().strip()
    try:
        return version_from_wheel(metadata.version("vllm")) or UNKNOWN_VERSION
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def version_from_wheel(vllm_version: str) -> str | None:
    """``0.1.0`` from ``0.26.0+proxima.0.1.0`` or ``0.26.0+proxima.0.1.0.cpu``;
    ``None`` for a version the wheel builder did not stamp."""
    _, _, local = vllm_version.partition("+")
    if not local.startswith("proxima."):
        return None
    version = local.removeprefix("proxima.").removesuffix(".cpu")
    return version or None


__version__ = _read_version()

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


__all__ = ["ProximaEngineArgs", "__version__", "enable_proxima", "version_from_wheel"]
