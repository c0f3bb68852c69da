"""Scrape the server's Prometheus ``/metrics`` (and GPU memory) into time series.

:class:`MetricsScraper` is a background thread that polls ``/metrics`` every
``interval`` seconds during a benchmark run and keeps the watched metrics
(:data:`WATCHED`, plus every ``proxima:*`` metric) aligned on one time axis;
where ``nvidia-smi`` exists it also polls ``memory.used`` (the server's own
``torch.cuda`` figures are not reachable from outside the process).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

WATCHED: tuple[str, ...] = (
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
WATCHED_PREFIXES: tuple[str, ...] = ("proxima:",)
# Fractions: averaged over engines instead of summed.
MEAN_METRICS = frozenset({"vllm:kv_cache_usage_perc", "proxima:kv_slot_utilization"})
GPU_MEMORY = "gpu:memory_used_mib"

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SKIP_SUFFIXES = ("_created", "_bucket")


@dataclass(frozen=True)
class Sample:
    """One Prometheus sample line."""

    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """Parse Prometheus text exposition format (comments and bad lines skipped)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        raw = m.group("labels") or ""
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _LABEL.findall(raw)}
        samples.append(Sample(m.group("name"), labels, value))
    return samples


def select(
    samples: Iterable[Sample],
    names: Iterable[str] = WATCHED,
    prefixes: Iterable[str] = WATCHED_PREFIXES,
) -> dict[str, float]:
    """The watched metrics, one value each: summed over label sets (engines).

    Fractions in :data:`MEAN_METRICS` are averaged instead; ``*_created`` and
    histogram buckets are skipped.
    """
    wanted = set(names)
    prefixes = tuple(prefixes)
    acc: dict[str, list[float]] = {}
    for s in samples:
        if s.name.endswith(_SKIP_SUFFIXES):
            continue
        if s.name in wanted or s.name.startswith(prefixes):
            acc.setdefault(s.name, []).append(s.value)
    return {
        name: (sum(vals) / len(vals) if name in MEAN_METRICS else sum(vals))
        for name, vals in acc.items()
    }


def info_labels(samples: Iterable[Sample], name: str) -> list[dict[str, str]]:
    """The label sets of an info-style metric (e.g. ``vllm:cache_config_info``)."""
    return [dict(s.labels) for s in samples if s.name == name]


def fetch_metrics(base_url: str, timeout: float = 5.0) -> str:
    """GET ``{base_url}/metrics`` as text.

    Raises:
        OSError: connection problems (``urllib.error.URLError`` included).
    """
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=timeout) as resp:
        return resp.read().decode("utf-8", "replace")


def scrape(base_url: str, timeout: float = 5.0) -> dict[str, float]:
    """One scrape of the watched metrics."""
    return select(parse_prometheus(fetch_metrics(base_url, timeout)))


class GpuMemoryPoller:
    """``nvidia-smi --query-gpu=memory.used`` for the visible GPUs (MiB, summed).

    Honors ``CUDA_VISIBLE_DEVICES`` when it lists indices. :meth:`available`
    is False on machines without ``nvidia-smi``.
    """

    def __init__(self) -> None:
        self.exe = shutil.which("nvidia-smi")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        self.ids = ids if ids and all(v.isdigit() for v in ids) else []

    def available(self) -> bool:
        """Whether ``nvidia-smi`` exists and answers."""
        return self.exe is not None and self.used_mib() is not None

    def used_mib(self) -> float | None:
        """Memory in use on the visible GPUs, or None if it cannot be read."""
        if self.exe is None:
            return None
        cmd = [self.exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        if self.ids:
            cmd.append("--id=" + ",".join(self.ids))
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
            values = [float(x) for x in out.stdout.split() if x.strip()]
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        return sum(values) if values else None

    def used_mib_of(self, pids: set[int]) -> float | None:
        """GPU memory held by the processes ``pids`` (MiB, summed over the visible GPUs;
        ``--query-compute-apps``), or None if it cannot be read. Tells apart several
        servers sharing one GPU, where :meth:`used_mib` is their sum."""
        if self.exe is None:
            return None
        cmd = [self.exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        if self.ids:
            cmd.append("--id=" + ",".join(self.ids))
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
            rows = [line.split(",") for line in out.stdout.splitlines() if line.strip()]
            return sum(float(mib) for pid, mib in rows if int(pid) in pids)
        except (OSError, subprocess.SubprocessError, ValueError):
            return None


@dataclass
class TimeSeries:
    """Metric samples on one time axis (seconds since the scraper started).

    ``values[name][i]`` is the value at ``t[i]``; None where the metric was
    not exported yet (``proxima:*`` appear after the first scheduler step).
    """

    t: list[float] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    errors: int = 0
    last_error: str | None = None

    def add(self, t: float, sample: dict[str, float]) -> None:
        """Append one scrape, padding series that start or stop with None."""
        n = len(self.t)
        for name in sample:
            if name not in self.values:
                self.values[name] = [None] * n
        for name, series in self.values.items():
            value = sample.get(name)
            series.append(None if value is None or math.isnan(value) else value)
        self.t.append(round(t, 3))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "t": self.t,
            "values": self.values,
            "errors": self.errors,
            "last_error": self.last_error,
        }


class MetricsScraper(threading.Thread):
    """Background thread polling ``/metrics`` (and GPU memory) into a series.

    Args:
        base_url: ``http://127.0.0.1:PORT``.
        interval: seconds between scrapes.
        gpu: a :class:`GpuMemoryPoller` to read each tick, or None.
        on_tick: called with (elapsed seconds, latest values) after each scrape
            (used for progress lines); exceptions in it are swallowed.
    """

    def __init__(
        self,
        base_url: str,
        interval: float = 0.5,
        gpu: GpuMemoryPoller | None = None,
        on_tick: Callable[[float, dict[str, float]], None] | None = None,
    ) -> None:
        super().__init__(name="metrics-scraper", daemon=True)
        self.base_url = base_url
        self.interval = interval
        self.gpu = gpu
        self.on_tick = on_tick
        self.series = TimeSeries()
        self._stop_event = threading.Event()
        self._t0 = time.monotonic()
        self.started_at = time.time()

    def scrape_once(self) -> dict[str, float]:
        """Scrape now and append to the series (also called around a run)."""
        elapsed = time.monotonic() - self._t0
        try:
            values = scrape(self.base_url, timeout=max(2.0, self.interval * 4))
        except (OSError, urllib.error.URLError, ValueError) as e:
            self.series.errors += 1
            self.series.last_error = f"{type(e).__name__}: {e}"
            values = {}
        if self.gpu is not None:
            used = self.gpu.used_mib()
            if used is not None:
                values[GPU_MEMORY] = used
        if values:
            self.series.add(elapsed, values)
            if self.on_tick is not None:
                # Progress printing must never stop the scraping.
                with contextlib.suppress(Exception):
                    self.on_tick(elapsed, values)
        return values

    def run(self) -> None:
        """Thread body: scrape every ``interval`` seconds until stopped."""
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            self.scrape_once()
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow scrape): do not burst to catch up
                next_at = time.monotonic()
                delay = 0.0
            self._stop_event.wait(delay)

    def stop(self, timeout: float = 10.0) -> TimeSeries:
        """Stop the thread, take one last scrape, and return the series."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
        self.scrape_once()
        return self.series


def summarize(series: TimeSeries) -> dict[str, Any]:
    """Peaks, means and counter increases of a run's series.

    Returns:
        ``peak_kv_usage`` (fraction), ``peak_proxima_slot_utilization``,
        ``peak_running``, ``mean_running`` (over samples with requests
        running), ``peak_waiting``, ``preemptions`` (vLLM counter increase),
        ``proxima_preemptions``, ``prefix_cache_queries`` / ``_hits`` /
        ``prefix_cache_hit_rate``, ``prompt_tokens``, ``generation_tokens``
        (server-side counter increases), ``peak_gpu_memory_mib`` (None without
        a GPU) and ``samples``.
    """

    def vals(name: str) -> list[float]:
        return [v for v in series.values.get(name, []) if v is not None]

    def peak(name: str) -> float | None:
        v = vals(name)
        return max(v) if v else None

    def increase(name: str) -> float | None:
        v = vals(name)
        return (v[-1] - v[0]) if v else None

    running = [v for v in vals("vllm:num_requests_running") if v > 0]
    queries = increase("vllm:prefix_cache_queries_total")
    hits = increase("vllm:prefix_cache_hits_total")
    return {
        "samples": len(series.t),
        "peak_kv_usage": peak("vllm:kv_cache_usage_perc"),
        "peak_proxima_slot_utilization": peak("proxima:kv_slot_utilization"),
        "peak_proxima_slots_used": peak("proxima:kv_slots_used"),
        "peak_block16_stranded_slots": peak("proxima:kv_block16_stranded_slots"),
        "peak_running": peak("vllm:num_requests_running"),
        "mean_running": (sum(running) / len(running)) if running else None,
        "peak_waiting": peak("vllm:num_requests_waiting"),
        "preemptions": increase("vllm:num_preemptions_total"),
        "proxima_preemptions": increase("proxima:preemptions_total"),
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": (hits / queries) if queries and hits is not None else None,
        "prompt_tokens": increase("vllm:prompt_tokens_total"),
        "generation_tokens": increase("vllm:generation_tokens_total"),
        "peak_gpu_memory_mib": peak(GPU_MEMORY),
    }
