"""Draws a Grafana dashboard's time-series panels from a Prometheus server, as a PNG.

Grafana is not installable on the project's machines (no Debian package, no PyPI one), so the
picture of the dashboard in ``docs/observability.md`` is made by this script: it sends every
panel's PromQL, exactly as written in the dashboard JSON (with ``$model_name`` and
``$__rate_interval`` substituted), to Prometheus' ``/api/v1/query_range`` and draws the answers on
the panels' grid positions. So the queries are checked against a real Prometheus; only the
drawing is not Grafana's. The answers are also written as JSON beside the picture.

    python observability/render.py --prometheus http://127.0.0.1:9090 --model-name tiny \\
        --start 1733280000 --end 1733280300 --out docs/observability/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import math
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "grafana" / "proxima.json"


def substitute(expr: str, model_name: str, rate_interval: str) -> str:
    """The dashboard's template variables, as Grafana fills them in."""
    return expr.replace("$model_name", model_name).replace("$__rate_interval", rate_interval)


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    """Prometheus' answer (the ``result`` list of a matrix) to one range query."""
    args = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{args}", timeout=30) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body}")
    return body["data"]["result"]


def collect(
    dashboard: dict[str, Any],
    base: str,
    model_name: str,
    start: float,
    end: float,
    step: float,
    rate_interval: str,
) -> list[dict[str, Any]]:
    """Every panel with, for each of its targets, the series Prometheus returned."""
    panels = []
    for panel in dashboard["panels"]:
        targets = []
        for target in panel["targets"]:
            expr = substitute(target["expr"], model_name, rate_interval)
            targets.append(
                {
                    "legend": target["legendFormat"],
                    "expr": expr,
                    "series": query_range(base, expr, start, end, step),
                }
            )
        panels.append(
            {
                "title": panel["title"],
                "unit": panel["fieldConfig"]["defaults"].get("unit", "none"),
                "stacked": panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"]
                == "normal",
                "gridPos": panel["gridPos"],
                "targets": targets,
            }
        )
    return panels


def _points(series: list[dict], t0: float) -> tuple[list[float], list[float]]:
    if not series:
        return [], []
    xs, ys = [], []
    for t, v in series[0]["values"]:
        y = float(v)
        xs.append((float(t) - t0) / 60)
        ys.append(y if math.isfinite(y) else math.nan)
    return xs, ys


def _seconds(value: float, _pos: object = None) -> str:
    """An axis label for seconds: ms, or us below a millisecond."""
    if abs(value) < 1e-3:
        return f"{value * 1e6:.0f} us"
    return f"{value * 1000:.0f} ms"


def draw(panels: list[dict[str, Any]], start: float, out: Path, title: str) -> None:
    """The panels on a dark grid (Grafana's 24-column layout, 8 rows a panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 8
    plt.style.use("dark_background")
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), squeeze=False)
    fig.patch.set_facecolor("#111217")
    for panel in panels:
        ax = axes[panel["gridPos"]["y"] // 8][panel["gridPos"]["x"] // 12]
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], loc="left", fontsize=10, color="#ccccdc")
        stack = None
        for target in panel["targets"]:
            xs, ys = _points(target["series"], start)
            if not xs:
                ax.plot([], [], label=f"{target['legend']} (no data)")
                continue
            if panel["stacked"]:
                base = stack or [0.0] * len(ys)
                top = [b + (0.0 if math.isnan(y) else y) for b, y in zip(base, ys, strict=False)]
                ax.fill_between(xs, base[: len(xs)], top, alpha=0.35, label=target["legend"])
                ax.plot(xs, top, linewidth=1)
                stack = top
            else:
                ax.plot(xs, ys, linewidth=1.2, label=target["legend"])
        unit = panel["unit"]
        if unit == "percentunit":
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        elif unit == "s":
            ax.yaxis.set_major_formatter(FuncFormatter(_seconds))
        ax.grid(color="#2c3235", linewidth=0.6)
        ax.tick_params(labelsize=8, colors="#9fa7b3")
        ax.set_xlabel("minutes", fontsize=8, color="#9fa7b3")
        ax.legend(fontsize=7, loc="upper right", framealpha=0.3)
    fig.suptitle(title, x=0.01, ha="left", fontsize=12, color="#ccccdc")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--dashboard", type=Path, default=DASHBOARD)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--start", type=float, required=True, help="unix seconds")
    parser.add_argument("--end", type=float, required=True, help="unix seconds")
    parser.add_argument("--step", type=float, default=2.0)
    parser.add_argument("--rate-interval", default="15s")
    parser.add_argument("--title", default="proxima-vllm (drawn from Prometheus by render.py)")
    parser.add_argument("--out", type=Path, required=True, help="PNG; the JSON goes beside it")
    args = parser.parse_args()
    dashboard = json.loads(args.dashboard.read_text())
    panels = collect(
        dashboard,
        args.prometheus,
        args.model_name,
        args.start,
        args.end,
        args.step,
        args.rate_interval,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"start": args.start, "end": args.end, "step": args.step, "panels": panels})
    )
    draw(panels, args.start, args.out, args.title)
    empty = [
        f"{p['title']}: {t['legend']}" for p in panels for t in p["targets"] if not t["series"]
    ]
    print(f"wrote {args.out}; targets without data: {empty or 'none'}")


if __name__ == "__main__":
    main()
