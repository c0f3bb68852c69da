"""``ProximaEngineArgs``: vLLM's ``EngineArgs`` with the proxima options as fields."""

from __future__ import annotations

from dataclasses import dataclass

from vllm.engine.arg_utils import EngineArgs

from vllm_proxima.engine_args import merge_options


@dataclass
class ProximaEngineArgs(EngineArgs):
    """``EngineArgs`` plus proxima's options (``None`` = default).

    Example:
        ``LLMEngine.from_engine_args(ProximaEngineArgs(model=..., proxima="off"))``
    """

    proxima: str | None = None
    proxima_admission: str | None = None
    proxima_overcommit: float | None = None
    proxima_debug_invariants: bool | None = None
    proxima_evict: str | None = None
    proxima_horizon: int | None = None
    proxima_kv_layout: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        options = {
            "mode": self.proxima,
            "admission": self.proxima_admission,
            "overcommit": self.proxima_overcommit,
            "debug_invariants": self.proxima_debug_invariants,
            "evict": self.proxima_evict,
            "horizon": self.proxima_horizon,
            "kv_layout": self.proxima_kv_layout,
        }
        options = {k: v for k, v in options.items() if v is not None}
        if options:
            merge_options(self, options)
