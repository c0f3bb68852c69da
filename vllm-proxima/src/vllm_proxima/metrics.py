"""``proxima:*`` Prometheus metrics beside vLLM's ``vllm:*``.

The scheduler (engine core) puts its figures into
``SchedulerStats.plugin_stats["proxima"]``; this stat-logger plugin
(``vllm.stat_logger_plugins``, front-end process) exports them on the same
``/metrics`` endpoint. Gauges mirror the current value. Counters travel as the
increase since the engine's previous report (:func:`to_deltas`), as vLLM's own
prefix-cache stats do: the engine sends each step's stats to one front-end only, so
with several API servers (``--api-server-count``, data parallel) a front-end that
differenced cumulative totals itself would count the same increase twice.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

# stats key -> (metric name, kind, help)
METRICS: dict[str, tuple[str, str, str]] = {
    "page_size": (
        "proxima:kv_page_size",
        "gauge",
        "Tokens per KV page: vLLM's block size in the paged layout, 1 in the token layout.",
    ),
    "slots_total": (
        "proxima:kv_slots_total",
        "gauge",
        "Usable KV token slots: kv_slots_used + kv_slots_cached + kv_slots_free.",
    ),
    "slots_used": (
        "proxima:kv_slots_used",
        "gauge",
        "KV token slots in pages requests hold (the prefix cache's share of them included).",
    ),
    "slots_cached": (
        "proxima:kv_slots_cached",
        "gauge",
        "KV token slots in cached pages no request holds: free, but a prefix hit can reuse them.",
    ),
    "slots_free": ("proxima:kv_slots_free", "gauge", "KV token slots neither held nor cached."),
    "slot_utilization": (
        "proxima:kv_slot_utilization",
        "gauge",
        "Fraction of usable KV slots held by requests (as vllm:kv_cache_usage_perc).",
    ),
    "stranded_block16": (
        "proxima:kv_block16_stranded_slots",
        "gauge",
        (
            "Slots that block-16 rounding would leave empty for the requests "
            "resident now (what token granularity saves)."
        ),
    ),
    "preemptions": (
        "proxima:preemptions_total",
        "counter",
        "Requests preempted by proxima's scheduler.",
    ),
    "admissions_deferred": (
        "proxima:admissions_deferred_total",
        "counter",
        "Times a waiting request was held back by the admission policy.",
    ),
    "cached_slots": ("proxima:prefix_cached_slots", "gauge", "Slots held by the prefix cache."),
    "shared_slots": (
        "proxima:prefix_shared_slots",
        "gauge",
        "Cached slots also referenced by a running request.",
    ),
    "prefix_hits_tokens": (
        "proxima:prefix_hit_tokens_total",
        "counter",
        "Prompt tokens found in the prefix cache (token granularity).",
    ),
    "prefix_queries_tokens": (
        "proxima:prefix_query_tokens_total",
        "counter",
        "Prompt tokens looked up in the prefix cache.",
    ),
    "evictions": (
        "proxima:prefix_evicted_slots_total",
        "counter",
        "Cached slots freed by the eviction policy.",
    ),
    "steps": ("proxima:steps_total", "counter", "Scheduler steps (calls of schedule())."),
    "schedule_seconds": (
        "proxima:schedule_seconds_total",
        "counter",
        "CPU seconds in the scheduler's schedule() (upstream's work and proxima's).",
    ),
    "admission_seconds": (
        "proxima:admission_seconds_total",
        "counter",
        "CPU seconds of those in proxima's admission decisions.",
    ),
    "projected_peak_pages": (
        "proxima:projected_peak_pages",
        "gauge",
        (
            "Projected peak KV demand of the resident requests, in pages (proxima:kv_page_size), "
            "as admission last planned it: the projection's peak, or an upper bound of it where "
            "a fast path admitted without projecting."
        ),
    ),
}

COUNTERS = frozenset(key for key, (_, kind, _) in METRICS.items() if kind == "counter")
COUNTER, GAUGE = "counter", "gauge"

_LABELS = ["model_name", "engine"]


def to_deltas(stats: dict[str, Any], emitted: dict[str, float]) -> dict[str, Any]:
    """Engine side: replace the counters' cumulative totals in ``stats`` by their
    increase since the previous call (``emitted`` keeps the totals between calls).

    A total that went down (the prefix cache was reset) restarts from zero.
    """
    out = dict(stats)
    for key in COUNTERS & stats.keys():
        total = float(stats[key])
        before = emitted.get(key, 0.0)
        out[key] = total - before if total >= before else total
        emitted[key] = total
    return out


_collectors: dict[str, Any] = {}

MODE_INFO = "proxima:mode_info"


def _mode_info_gauge() -> Any:
    import prometheus_client

    if MODE_INFO not in _collectors:
        _collectors[MODE_INFO] = prometheus_client.Gauge(
            MODE_INFO,
            "1 for the mode this engine runs: mode 'on' (proxima) or 'off' (stock vLLM), and "
            "why: 'requested' (--proxima on|off), 'supported' (--proxima auto, on) or what "
            "proxima mode cannot run (--proxima auto, off).",
            labelnames=[*_LABELS, "mode", "reason"],
            multiprocess_mode="mostrecent",
        )
    return _collectors[MODE_INFO]


def _collector(key: str) -> tuple[Any, str]:
    """The Prometheus collector for a stats key (created once per process)."""
    import prometheus_client

    name, kind, doc = METRICS.get(
        key, (f"proxima:{key}", "gauge", f"proxima scheduler figure {key!r}.")
    )
    if key not in _collectors:
        if kind == "counter":
            _collectors[key] = prometheus_client.Counter(
                name.removesuffix("_total"), doc, labelnames=_LABELS
            )
        else:
            # As vLLM's own gauges: with several API servers (multiprocess mode) the
            # newest value wins, not one series per process.
            _collectors[key] = prometheus_client.Gauge(
                name, doc, labelnames=_LABELS, multiprocess_mode="mostrecent"
            )
    return _collectors[key], kind


class ProximaStatLogger(StatLoggerBase):
    """Exports ``plugin_stats["proxima"]`` as ``proxima:*`` metrics."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.model_name = vllm_config.model_config.served_model_name
        self._children: dict[tuple[str, tuple[str, str]], Any] = {}
        self._last: dict[tuple[str, tuple[str, str]], Any] = {}
        self._export_mode(vllm_config)

    def _export_mode(self, vllm_config: Any) -> None:
        """``proxima:mode_info``, once: the engine's config is settled before it starts."""
        from vllm_proxima.config import ProximaConfig

        config = ProximaConfig.from_vllm_config(vllm_config)
        mode, reason = config.mode, config.mode_reason or "requested"
        if mode == "auto":  # never settled: the engine-args hook did not run, stock runs
            mode, reason = "off", "no engine-args hook"
        _mode_info_gauge().labels(self.model_name, str(self.engine_index), mode, reason).set(1)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is None:
            return
        plugin_stats = getattr(scheduler_stats, "plugin_stats", None) or {}
        stats = plugin_stats.get("proxima")
        if not stats:
            return
        stats = dict(stats)
        total = stats.get("slots_total") or 0
        if total:
            stats["slot_utilization"] = stats.get("slots_used", 0) / total
        labels = (self.model_name, str(engine_idx))
        last = self._last
        for key, value in stats.items():
            kind = COUNTER if key in COUNTERS else GAUGE
            if kind == COUNTER and value <= 0:
                continue  # counters arrive as the increase since the previous report
            if kind == GAUGE and last.get((key, labels)) == value:
                continue  # unchanged: no Prometheus write (this runs every engine step)
            child = self._children.get((key, labels))
            if child is None:
                child = self._children[(key, labels)] = _collector(key)[0].labels(*labels)
            if kind == COUNTER:
                child.inc(value)
            else:
                child.set(value)
                last[(key, labels)] = value

    def log_engine_initialized(self) -> None:
        return None
