"""ProximaConfig: every ``--proxima*`` option and its value checks.

One error type, :class:`ProximaConfigError`, whose message names the flag (or
environment variable) at fault and the way out. What is checked here:

* each ``--proxima*`` value (:class:`ProximaConfig`, when it is built);
* ``$PROXIMA_MODE`` and ``$PROXIMA_ATTENTION``;
* the combinations with vLLM's own flags the chosen KV layout cannot run
  (:func:`check_engine_args`, at start, before any vLLM config is built);
* what only the engine core knows: the model's KV cache groups and the model
  runner (:func:`check_kv_cache_config`, :func:`check_model_runner`, token layout).

The options travel from the command line (or ``ProximaEngineArgs`` /
``enable_proxima``) to every engine process inside
``VllmConfig.additional_config["proxima"]`` as a plain dict, so they survive
pickling and msgspec on the way to the engine core and workers. Each process
rebuilds the typed config with :meth:`ProximaConfig.from_vllm_config`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

CONFIG_KEY = "proxima"
MODE_ENV = "PROXIMA_MODE"
"""Environment variable giving the default mode (``auto``/``on``/``off``) when no flag says."""

MODES = ("auto", "on", "off")
DEFAULT_MODE = "auto"
ADMISSION_POLICIES = ("stock", "conservative", "adaptive")
EVICTION_POLICIES = ("lru", "lfu", "arc")
KV_LAYOUTS = ("auto", "paged", "token")
ATTENTION_ENV = "PROXIMA_ATTENTION"
"""Environment variable choosing the token layout's GPU kernel over 1-token pages."""
ATTENTION_CHOICES = ("triton", "flash_attn")
SCHEDULER_CLS = "vllm_proxima.scheduling.scheduler.proxima_scheduler"


class ProximaConfigError(ValueError):
    """Bad proxima configuration: a bad ``--proxima*`` value, or a vLLM flag or
    model the chosen mode and KV layout cannot run. The message names the flag."""


@dataclass(slots=True, frozen=True)
class ProximaConfig:
    """Options of proxima mode.

    Attributes:
        mode: ``auto`` (the distribution's default: ``on`` where the configuration
            is supported, ``off`` where it is not), ``on`` (projected-peak admission
            and proxima's KV accounting; refuses an unsupported configuration at
            start) or ``off`` (upstream vLLM behaviour, same install). Settled to
            ``on`` or ``off`` at start (:func:`settle_mode`). ``auto`` is the default
            of the flag and of :meth:`from_dict`; a config built directly is ``on``.
        mode_reason: why the settled mode is what it is: ``requested`` (``--proxima
            on|off`` or ``$PROXIMA_MODE``), ``supported`` (``auto``, on) or, for
            ``auto`` stepping aside, what proxima mode cannot run. ``None`` until settled.
        admission: admission policy for waiting requests: ``stock`` (upstream's:
            admit while slots are free), ``conservative`` (admit only if every
            resident request can reach its ``max_tokens``), ``adaptive``
            (projected peak with a learned output-length estimate).
        horizon: decode steps ahead the projection covers (``0``: the whole future).
            Admission then promises no preemption for that many steps, not for
            ever: a request that would outgrow the pool only later is admitted,
            and the KV that stays busy meanwhile is worth more than the rare
            recompute.
        overcommit: for ``adaptive``, the fraction of the pool the projected peak
            may exceed (0.0-0.5).
        debug_invariants: check the slot pool's invariants after every change
            (slow; for tests and debugging).
        prefix_sharing: token-level prefix sharing (the radix cache). ``None``
            until resolved from vLLM's ``--enable-prefix-caching`` (on by default).
        evict: eviction policy of the token layout's prefix cache: ``lru``,
            ``lfu`` or ``arc`` (``None``: ``lru``). The paged layout keeps vLLM's
            prefix cache, whose eviction is LRU.
        kv_layout: ``paged`` (vLLM's block pool, block size and attention backend:
            the kernels stock runs), ``token`` (a global pool of 1-token slots read
            by proxima's backends, token-level prefix sharing) or ``auto`` (the
            layout measured fastest: ``paged``; see :func:`resolve_kv_layout`).
    """

    mode: str = "on"
    admission: str = "adaptive"
    horizon: int = 128
    overcommit: float = 0.0
    debug_invariants: bool = False
    prefix_sharing: bool | None = None
    evict: str | None = None
    kv_layout: str = "auto"
    mode_reason: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ProximaConfigError(
                f"--proxima must be one of {', '.join(MODES)}; got {self.mode!r}"
            )
        if self.admission not in ADMISSION_POLICIES:
            raise ProximaConfigError(
                "--proxima-admission must be one of "
                f"{', '.join(ADMISSION_POLICIES)}; got {self.admission!r}"
            )
        if self.evict is not None and self.evict not in EVICTION_POLICIES:
            raise ProximaConfigError(
                f"--proxima-evict must be one of {', '.join(EVICTION_POLICIES)}; got {self.evict!r}"
            )
        if self.kv_layout not in KV_LAYOUTS:
            raise ProximaConfigError(
                f"--proxima-kv-layout must be one of {', '.join(KV_LAYOUTS)}; "
                f"got {self.kv_layout!r}"
            )
        if self.kv_layout == "paged" and self.evict not in (None, "lru"):
            raise ProximaConfigError(
                f"--proxima-evict {self.evict} needs --proxima-kv-layout token: the paged "
                "layout keeps vLLM's prefix cache, which evicts least recently used blocks"
            )
        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int) or self.horizon < 0:
            raise ProximaConfigError(
                f"--proxima-horizon must be a whole number of steps >= 0; got {self.horizon!r}"
            )
        if not isinstance(self.overcommit, (int, float)) or not (
            0.0 <= float(self.overcommit) <= 0.5
        ):
            raise ProximaConfigError(
                f"--proxima-overcommit must be a number in [0.0, 0.5]; got {self.overcommit!r}"
            )

    @property
    def enabled(self) -> bool:
        return self.mode == "on"

    @property
    def token_layout(self) -> bool:
        """1-token slots (proxima's pool and backends) rather than vLLM's pages."""
        return self.kv_layout == "token"

    @property
    def eviction(self) -> str:
        """The token layout's eviction policy (``lru`` unless set)."""
        return self.evict or "lru"

    def resolved(self) -> ProximaConfig:
        """``auto`` settled: the layout every engine process must agree on."""
        if self.kv_layout != "auto":
            return self
        return dataclasses.replace(self, kv_layout=resolve_kv_layout(self))

    @classmethod
    def from_dict(cls, options: dict[str, Any] | None) -> ProximaConfig:
        """Build from a plain dict, rejecting unknown keys by name."""
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ProximaConfigError(
                f"unknown proxima option(s): {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        if "mode" not in options:
            options["mode"] = default_mode()
        return cls(**options)

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> ProximaConfig:
        """The config carried in ``vllm_config.additional_config``."""
        additional = getattr(vllm_config, "additional_config", None) or {}
        return cls.from_dict(additional.get(CONFIG_KEY))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def resolve_kv_layout(config: ProximaConfig) -> str:
    """The layout ``auto`` stands for.

    ``paged`` everywhere: on the H200, FlashAttention 3 and Triton over 1-token
    pages ran 0.80-0.90x of stock's FA3 over 16-token blocks on GQA models (and
    token granularity frees only ~0.1-3 % of KV, the last partial block of each
    request), while the paged layout runs exactly stock's kernels. An explicit
    ``--proxima-evict lfu|arc`` asks for the token layout's prefix cache.
    """
    if config.evict not in (None, "lru"):
        return "token"
    return "paged"


def default_mode() -> str:
    """Mode used when no flag or option names one: ``$PROXIMA_MODE`` or ``auto``."""
    mode = os.environ.get(MODE_ENV, DEFAULT_MODE).strip().lower() or DEFAULT_MODE
    if mode not in MODES:
        raise ProximaConfigError(f"${MODE_ENV} must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


def attention_choice() -> str:
    """``$PROXIMA_ATTENTION`` (``triton`` unless set), checked."""
    choice = os.environ.get(ATTENTION_ENV, "triton").strip().lower() or "triton"
    if choice not in ATTENTION_CHOICES:
        raise ProximaConfigError(
            f"${ATTENTION_ENV}={choice!r}: choose one of "
            f"{', '.join(sorted(ATTENTION_CHOICES))} (default triton)"
        )
    return choice
