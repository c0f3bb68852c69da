"""What the engine A/B reads of the engine: a stat logger, vLLM's public seam.

vLLM hands every stat logger the scheduler's ``SchedulerStats`` and the front
end's ``IterationStats`` after each step (the figures behind ``vllm:*`` and,
through ``plugin_stats``, proxima's ``proxima:*``). The harness registers one
more logger (``LLMEngine.from_engine_args(..., stat_loggers=[...])``) and keeps
per-run totals: preemptions (``vllm:num_preemptions``), the KV in use
(``vllm:kv_cache_usage_perc``), requests running and waiting
(``vllm:num_requests_running`` / ``_waiting``), proxima's prefix-cache evictions and
scheduler time (``proxima:prefix_evicted_slots_total``,
``proxima:schedule_seconds_total``, ``proxima:steps_total``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class RunTotals:
    """Totals since the last :meth:`StepStats.reset` (one run)."""

    preemptions: int = 0
    kv_usage_peak: float = 0.0
    kv_usage_last: float = 0.0
    running: int = 0  # requests running and waiting after the last step
    waiting: int = 0
    evicted_slots: int | None = None  # proxima's token layout with prefix caching
    proxima_schedule_s: float = 0.0
    proxima_steps: int = 0


def stat_logger_factory() -> tuple[Any, list[StepStats]]:
    """A factory to pass in ``stat_loggers`` and the list it puts its logger in."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    made: list[StepStats] = []

    class _Logger(StepStats, StatLoggerBase):
        pass

    def factory(vllm_config: Any, engine_index: int = 0) -> StepStats:
        logger = _Logger(vllm_config, engine_index)
        made.append(logger)
        return logger

    return factory, made


class StepStats:
    """Per-run totals of the stats vLLM reports each step (see module doc)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.totals = RunTotals()

    def reset(self) -> RunTotals:
        """Start a new run; returns the finished run's totals."""
        done, self.totals = self.totals, RunTotals()
        return done

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        t = self.totals
        if iteration_stats is not None:
            t.preemptions += int(iteration_stats.num_preempted_reqs)
        if scheduler_stats is None:
            return
        t.kv_usage_last = float(scheduler_stats.kv_cache_usage)
        t.running = int(scheduler_stats.num_running_reqs)
        t.waiting = int(scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs)
        t.kv_usage_peak = max(t.kv_usage_peak, t.kv_usage_last)
        proxima = (scheduler_stats.plugin_stats or {}).get("proxima") or {}
        if "evictions" in proxima:  # counters arrive as increases
            t.evicted_slots = (t.evicted_slots or 0) + int(proxima["evictions"])
        t.proxima_schedule_s += float(proxima.get("schedule_seconds", 0.0))
        t.proxima_steps += int(proxima.get("steps", 0))

    def log_engine_initialized(self) -> None:
        pass

    def log(self) -> None:
        pass

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        pass
