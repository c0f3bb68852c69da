"""Writes ``observability/grafana/proxima.json``: a Grafana dashboard for proxima's ``proxima:*``
series and the ``vllm:*`` series one reads beside them.

The dashboard is generated, not hand-edited, so that every panel has the same shape and the test
(``tests/unit/test_dashboard.py``) can check that the committed JSON is what this script makes and
that every series it queries exists. Its format follows upstream's
``examples/observability/prometheus_grafana/grafana.json`` (schema 39, a ``DS_PROMETHEUS``
datasource variable and a ``model_name`` variable), so it imports the same way.

    python observability/make_dashboard.py            # rewrite the JSON
    python observability/make_dashboard.py --check    # exit 1 if the committed JSON is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "grafana" / "proxima.json"
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
M = '{model_name="$model_name"}'
RI = "[$__rate_interval]"


@dataclass
class Panel:
    """One time-series panel: a title, what it shows, its unit and its queries (legend, expr)."""

    title: str
    description: str
    unit: str
    targets: list[tuple[str, str]]
    stacked: bool = False
    overrides: list[dict[str, Any]] = field(default_factory=list)


def quantiles(metric: str) -> list[tuple[str, str]]:
    """P50/P95/P99 of a vLLM histogram."""
    return [
        (f"P{q}", f"histogram_quantile(0.{q:02d}, sum by(le) (rate({metric}_bucket{M}{RI})))")
        for q in (50, 95, 99)
    ]


def ratio(num: str, den: str) -> str:
    """rate(num) / rate(den) over the panel's interval."""
    return f"rate({num}{M}{RI})\n/\nrate({den}{M}{RI})"


PANELS: list[Panel] = [
    Panel(
        "KV slots: held, cached, free (proxima)",
        "Every usable KV token slot is held by a request, cached (no request holds it; a prefix "
        "hit can reuse it, eviction can free it) or free. The three add up to "
        "proxima:kv_slots_total; after traffic, held returns to 0.",
        "none",
        [
            ("held", f"proxima:kv_slots_used{M}"),
            ("cached (evictable)", f"proxima:kv_slots_cached{M}"),
            ("free", f"proxima:kv_slots_free{M}"),
        ],
        stacked=True,
    ),
    Panel(
        "KV usage: vLLM's gauge and proxima's",
        "vllm:kv_cache_usage_perc and proxima:kv_slot_utilization are the same fraction (held / "
        "usable; cached slots count as free in both). The projected peak is the admission's "
        "forecast of what the resident requests will hold, as a fraction of the pool.",
        "percentunit",
        [
            ("vllm:kv_cache_usage_perc", f"vllm:kv_cache_usage_perc{M}"),
            ("proxima:kv_slot_utilization", f"proxima:kv_slot_utilization{M}"),
            (
                "projected peak / pool",
                (
                    f"proxima:projected_peak_pages{M} * proxima:kv_page_size{M}\n/\n"
                    f"proxima:kv_slots_total{M}"
                ),
            ),
        ],
    ),
    Panel(
        "Requests running and waiting",
        "vLLM's scheduler state. Under projected-peak admission requests wait instead of being "
        "preempted.",
        "none",
        [
            ("running", f"vllm:num_requests_running{M}"),
            ("waiting", f"vllm:num_requests_waiting{M}"),
        ],
    ),
    Panel(
        "Preemptions and admission deferrals",
        "Preemptions per second (vLLM counts every scheduler's; proxima:preemptions_total only "
        "proxima's) and the times per second a waiting request was held back by the admission "
        "policy.",
        "reqps",
        [
            ("preemptions (vllm)", f"rate(vllm:num_preemptions_total{M}{RI})"),
            ("preemptions (proxima)", f"rate(proxima:preemptions_total{M}{RI})"),
            ("admissions deferred", f"rate(proxima:admissions_deferred_total{M}{RI})"),
        ],
    ),
    Panel(
        "Prefix cache hit rate",
        "Cached prompt tokens over prompt tokens looked up. vLLM's counters are per block in the "
        "paged layout; proxima's count whole lookups once, at admission (see docs/observability.md "
        "for why the two can differ).",
        "percentunit",
        [
            ("vllm", ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")),
            (
                "proxima",
                ratio("proxima:prefix_hit_tokens_total", "proxima:prefix_query_tokens_total"),
            ),
        ],
    ),
    Panel(
        "Prefix cache slots and evictions (token layout)",
        "Token layout only (the paged layout's prefix cache is vLLM's): slots the radix cache "
        "holds, those of them also held by a running request, and cached slots freed by "
        "eviction per second.",
        "none",
        [
            ("cached", f"proxima:prefix_cached_slots{M}"),
            ("shared with running", f"proxima:prefix_shared_slots{M}"),
            ("evicted / s", f"rate(proxima:prefix_evicted_slots_total{M}{RI})"),
        ],
    ),
    Panel(
        "Scheduler CPU per step",
        "CPU seconds of schedule() per scheduler step, and the admission decisions' part of it. "
        "With async scheduling this is hidden while it is shorter than the GPU step.",
        "s",
        [
            ("schedule()", ratio("proxima:schedule_seconds_total", "proxima:steps_total")),
            ("admission", ratio("proxima:admission_seconds_total", "proxima:steps_total")),
        ],
    ),
    Panel(
        "Token throughput",
        "Prompt and generated tokens per second.",
        "none",
        [
            ("prompt tok/s", f"rate(vllm:prompt_tokens_total{M}{RI})"),
            ("generation tok/s", f"rate(vllm:generation_tokens_total{M}{RI})"),
        ],
    ),
    Panel(
        "Time to first token",
        "vLLM's TTFT histogram.",
        "s",
        quantiles("vllm:time_to_first_token_seconds"),
    ),
    Panel(
        "End-to-end request latency",
        "vLLM's E2E latency histogram.",
        "s",
        quantiles("vllm:e2e_request_latency_seconds"),
    ),
    Panel(
        "Queue time",
        "Time requests spent waiting before their first schedule (P50/P95/P99).",
        "s",
        quantiles("vllm:request_queue_time_seconds"),
    ),
    Panel(
        "Inter-token latency",
        "vLLM's inter-token latency histogram.",
        "s",
        quantiles("vllm:inter_token_latency_seconds"),
    ),
]


def panel_json(panel: Panel, index: int) -> dict[str, Any]:
    custom = {
        "drawStyle": "line",
        "fillOpacity": 25 if panel.stacked else 0,
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if panel.stacked else "none"},
    }
    return {
        "datasource": DS,
        "description": panel.description,
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "palette-classic"},
                "custom": custom,
                "unit": panel.unit,
            },
            "overrides": panel.overrides,
        },
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "id": index + 1,
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": [
            {
                "datasource": DS,
                "editorMode": "code",
                "expr": expr,
                "legendFormat": legend,
                "range": True,
                "refId": chr(ord("A") + i),
            }
            for i, (legend, expr) in enumerate(panel.targets)
        ],
        "title": panel.title,
        "type": "timeseries",
    }


def dashboard() -> dict[str, Any]:
    return {
        "annotations": {"list": []},
        "description": "proxima-vllm: KV slots, projected-peak admission, prefix cache and "
        "scheduler cost beside vLLM's latency and throughput",
        "editable": True,
        "graphTooltip": 1,
        "links": [],
        "panels": [panel_json(p, i) for i, p in enumerate(PANELS)],
        "refresh": "5s",
        "schemaVersion": 39,
        "tags": ["vllm", "proxima"],
        "templating": {
            "list": [
                {
                    "label": "datasource",
                    "name": "DS_PROMETHEUS",
                    "query": "prometheus",
                    "type": "datasource",
                },
                {
                    "datasource": DS,
                    "definition": "label_values(vllm:num_requests_running, model_name)",
                    "label": "model_name",
                    "name": "model_name",
                    "query": {
                        "query": "label_values(vllm:num_requests_running, model_name)",
                        "refId": "StandardVariableQuery",
                    },
                    "refresh": 1,
                    "type": "query",
                },
            ]
        },
        "time": {"from": "now-15m", "to": "now"},
        "timezone": "",
        "title": "proxima-vllm",
        "uid": "proxima-vllm-kv",
        "version": 1,
    }


def render_json() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON is stale")
    args = parser.parse_args()
    text = render_json()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
