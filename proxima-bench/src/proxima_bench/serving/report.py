"""Markdown report and PNG plots from a serve_ab ``raw.json``.

``python -m proxima_bench.serving.report RAW.json [--out DIR] [--p95-target S]``
writes ``report.md`` and ``throughput.png``, ``latency_p95.png``,
``kv_usage.png`` (matplotlib, ``Agg`` backend; without matplotlib the report
is written without plots and says so).

The *knee* of a mode is the highest load (concurrency, then request rate)
whose P95 end-to-end latency meets the target and that completed with no
failed requests.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PLOTS = {
    "throughput": "throughput.png",
    "latency": "latency_p95.png",
    "kv": "kv_usage.png",
}
_COLORS = {"off": "tab:blue", "on": "tab:orange"}


# --------------------------------------------------------------------------
# data access
# --------------------------------------------------------------------------


def load_key(point: dict[str, Any]) -> tuple[float, float]:
    """Sort key of a load point: concurrency, then request rate (None = inf)."""
    c = point.get("max_concurrency")
    r = point.get("request_rate")
    return (math.inf if c is None else float(c), math.inf if r is None else float(r))


def points_of(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep points of the run, lightest load first."""
    points = (raw.get("config") or {}).get("points")
    if not points:
        seen: dict[str, dict[str, Any]] = {}
        for mode in raw.get("modes", {}).values():
            for run in mode.get("runs", []):
                seen.setdefault(run["point"]["label"], run["point"])
        points = list(seen.values())
    return sorted(points, key=load_key)


def run_for(raw: dict[str, Any], mode: str, label: str) -> dict[str, Any] | None:
    """The run of ``mode`` at the point labelled ``label`` (None if absent)."""
    for run in raw.get("modes", {}).get(mode, {}).get("runs", []):
        if run["point"]["label"] == label:
            return run
    return None


def run_ok(run: dict[str, Any] | None) -> bool:
    """Whether a run finished with metrics and no failed request."""
    if not run or run.get("error") or not run.get("metrics"):
        return False
    return not (run["metrics"].get("failed") or 0)


def knee(raw: dict[str, Any], mode: str, target_s: float) -> dict[str, Any] | None:
    """The highest load of ``mode`` whose P95 E2E latency is within ``target_s``.

    Returns:
        The point dict plus ``p95_e2el_s`` and ``output_throughput``, or None
        when no load meets the target.
    """
    best = None
    for point in points_of(raw):
        run = run_for(raw, mode, point["label"])
        if not run_ok(run):
            continue
        assert run is not None
        p95 = run["metrics"].get("p95_e2el_ms")
        if p95 is not None and p95 / 1000.0 <= target_s:
            best = {
                **point,
                "p95_e2el_s": p95 / 1000.0,
                "output_throughput": run["metrics"].get("output_throughput"),
                "request_throughput": run["metrics"].get("request_throughput"),
            }
    return best


# --------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------


def _num(value: Any, digits: int = 2, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value * scale:,.{digits}f}"


def _triple(metrics: dict[str, Any], name: str, scale: float = 1.0, digits: int = 1) -> str:
    return " / ".join(_num(metrics.get(f"p{p}_{name}_ms"), digits, scale) for p in (50, 95, 99))


def _pct(value: Any) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def point_table(raw: dict[str, Any], point: dict[str, Any]) -> list[str]:
    """Markdown rows comparing the modes at one load point."""
    lines = [
        (
            "| Mode | Done | Failed | RPS | Out tok/s | TTFT P50/P95/P99 (ms) "
            "| TPOT P50/P95/P99 (ms) | ITL P50/P95/P99 (ms) | E2E P50/P95/P99 (s) "
            "| Peak KV | Peak running | Preemptions | Prefix hit |"
        ),
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for mode in raw.get("modes", {}):
        run = run_for(raw, mode, point["label"])
        if run is None:
            continue
        if run.get("error") or not run.get("metrics"):
            lines.append(f"| {mode} | error: {(run.get('error') or '?').splitlines()[0][:80]} |")
            continue
        m, s = run["metrics"], run.get("summary") or {}
        preempt = s.get("preemptions")
        prox = s.get("proxima_preemptions")
        preempt_text = _num(preempt, 0)
        if prox is not None and prox != preempt:
            preempt_text += f" (proxima {prox:.0f})"
        lines.append(
            f"| {mode} | {m.get('completed')} | {m.get('failed')} "
            f"| {_num(m.get('request_throughput'))} | {_num(m.get('output_throughput'), 1)} "
            f"| {_triple(m, 'ttft')} | {_triple(m, 'tpot', digits=2)} "
            f"| {_triple(m, 'itl', digits=2)} | {_triple(m, 'e2el', 0.001, 2)} "
            f"| {_pct(s.get('peak_kv_usage'))} | {_num(s.get('peak_running'), 0)} "
            f"| {preempt_text} | {_pct(s.get('prefix_cache_hit_rate'))} |"
        )
    return lines


def summary_table(raw: dict[str, Any]) -> list[str]:
    """Markdown rows: output throughput and P95 E2E per mode at every load."""
    modes = list(raw.get("modes", {}))
    head = "| Load | " + " | ".join(f"{m} out tok/s | {m} P95 E2E (s)" for m in modes)
    sep = "|---|" + "--:|--:|" * len(modes)
    if len(modes) == 2:
        head += " | Δ out tok/s |"
        sep += "--:|"
    else:
        head += " |"
    lines = [head, sep]
    for point in points_of(raw):
        cells = []
        tput = []
        for mode in modes:
            run = run_for(raw, mode, point["label"])
            m = (run or {}).get("metrics") or {}
            value = m.get("output_throughput") if run_ok(run) else None
            tput.append(value)
            cells += [_num(value, 1), _num(m.get("p95_e2el_ms"), 2, 0.001)]
        row = f"| {point['label']} | " + " | ".join(cells)
        if len(modes) == 2:
            a, b = tput
            delta = f"{(b - a) / a * 100:+.1f}%" if a and b is not None else "–"
            row += f" | {delta}"
        lines.append(row + " |")
    return lines


def knee_section(raw: dict[str, Any], target_s: float) -> list[str]:
    """Markdown lines stating and comparing each mode's knee."""
    lines = [
        f"Knee: the highest load whose P95 E2E latency is ≤ {target_s:g} s (no failures).",
        "",
    ]
    knees = {mode: knee(raw, mode, target_s) for mode in raw.get("modes", {})}
    for mode, k in knees.items():
        if k is None:
            lines.append(f"- **{mode}**: no load met the target")
        else:
            lines.append(
                f"- **{mode}**: {k['label']} (P95 E2E {k['p95_e2el_s']:.2f} s, "
                f"{_num(k['output_throughput'], 1)} out tok/s, "
                f"{_num(k['request_throughput'])} req/s)"
            )
    if set(knees) >= {"off", "on"}:
        off, on = knees["off"], knees["on"]
        if off and on:
            ko, kn = load_key(off), load_key(on)
            if ko == kn:
                verdict = "the same load as off"
            else:
                verdict = "a higher load than off" if kn > ko else "a lower load than off"
            lines.append("")
            lines.append(
                f"proxima on sustains {verdict} within the target "
                f"({on['label']} vs {off['label']})."
            )
            if off.get("output_throughput") and on.get("output_throughput"):
                ratio = on["output_throughput"] / off["output_throughput"]
                lines.append(f"Output throughput at the knee: on / off = {ratio:.2f}×.")
    return lines


def setup_section(raw: dict[str, Any]) -> list[str]:
    """Markdown lines describing what was run where."""
    cfg = raw.get("config") or {}
    machine = raw.get("machine") or {}
    git = raw.get("git") or {}
    wl = raw.get("workload") or {}
    pk = machine.get("packages") or {}
    gpus = (
        ", ".join(f"{g.get('name')} ({g.get('memory_total')})" for g in machine.get("gpus") or [])
        or "none"
    )
    lines = [
        f"- Model: `{cfg.get('model')}`",
        f"- Server args (all modes): `{' '.join(cfg.get('server_args') or []) or '(none)'}`",
    ]
    for mode in cfg.get("modes") or []:
        lines.append(_mode_line(raw, mode))
    summary = wl.get("summary") or {}
    lengths = {k: v for k, v in summary.items() if k != "num_requests"}
    params = json.dumps(wl.get("params")) if wl.get("params") else ""
    cpu = f"{machine.get('cpu')} ×{machine.get('cpu_count')}"
    versions = (
        f"vLLM {pk.get('vllm')}, proxima {pk.get('vllm_proxima')}, "
        f"torch {pk.get('torch')}, Python {machine.get('python')}"
    )
    dirty = " (dirty)" if git.get("dirty") else ""
    lines += [
        (
            f"- Workload: {wl.get('name')} {params}; {cfg.get('num_prompts')} requests "
            f"per point; lengths {json.dumps(lengths)}"
        ),
        (
            "- Load generator: vLLM's `vllm bench serve` (custom dataset, ignore_eos, "
            f"temperature 0); `/metrics` scraped every {cfg.get('scrape_interval_s')} s"
        ),
        f"- Machine: {cpu}, {machine.get('mem_total_gib')} GiB; GPUs: {gpus}",
        f"- Software: {versions}",
        f"- Git: {git.get('commit', '?')}{dirty}",
        f"- Command: `{' '.join(raw.get('command') or [])}`",
    ]
    return lines


def _mode_line(raw: dict[str, Any], mode: dict[str, Any]) -> str:
    """One setup line: a mode's flags and what its server reported."""
    server = (raw.get("modes", {}).get(mode["label"]) or {}).get("server") or {}
    facts = server.get("log_facts") or {}
    cache = (server.get("cache_config") or [{}])[0] if server.get("cache_config") else {}
    flags = " ".join(["--proxima", mode["proxima"], *mode["args"]])
    text = f"- Mode **{mode['label']}**: `{flags}` — server reports proxima "
    text += str(facts.get("mode", "?"))
    if facts.get("admission"):
        text += f" (admission {facts['admission']})"
    text += f", KV cache {facts.get('kv_cache_size_tokens', '?')} tokens"
    if cache:
        text += f" ({cache.get('num_gpu_blocks')} blocks of {cache.get('block_size')})"
    if server.get("startup_s"):
        text += f", ready in {server['startup_s']} s"
    return text


def checks_section(raw: dict[str, Any]) -> list[str]:
    """Markdown lines: token-exactness and server-side token counts per run."""
    lines = [
        (
            "| Mode | Load | Prompt-length mismatches | Prompt tokens (file / server) "
            "| Output tokens (file / client / server) | Peak GPU mem (MiB) |"
        ),
        "|---|---|--:|--:|--:|--:|",
    ]
    for mode, record in raw.get("modes", {}).items():
        for run in record.get("runs", []):
            c = run.get("checks") or {}
            s = run.get("summary") or {}
            prompt = " / ".join(
                _num(c.get(k), 0) for k in ("expected_prompt_tokens", "server_prompt_tokens")
            )
            output = " / ".join(
                _num(c.get(k), 0)
                for k in (
                    "expected_output_tokens",
                    "client_output_tokens",
                    "server_generation_tokens",
                )
            )
            mismatches = c.get("client_prompt_len_mismatches", "–")
            lines.append(
                f"| {mode} | {run['point']['label']} | {mismatches} | {prompt} "
                f"| {output} | {_num(s.get('peak_gpu_memory_mib'), 0)} |"
            )
    return lines


def errors_section(raw: dict[str, Any]) -> list[str]:
    """Markdown lines listing mode and run errors (empty when none)."""
    lines = []
    for mode, record in raw.get("modes", {}).items():
        if record.get("error"):
            lines.append(f"- **{mode}**: {record['error'].splitlines()[0]}")
        fatal = (record.get("server") or {}).get("fatal_error")
        if fatal:
            lines.append(f"- **{mode}** server log: `{fatal}`")
        for run in record.get("runs", []):
            if run.get("error"):
                lines.append(
                    f"- **{mode} {run['point']['label']}**: {run['error'].splitlines()[0]}"
                )
            errors = (run.get("per_request") or {}).get("errors") or {}
            if errors:
                first = next(iter(errors.values())).splitlines()[0][:200]
                lines.append(
                    f"- **{mode} {run['point']['label']}**: {len(errors)} failed "
                    f"requests, e.g. `{first}`"
                )
    if raw.get("error"):
        lines.append(f"- {raw['error']}")
    return lines


# --------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------


def _x_axis(points: list[dict[str, Any]]) -> tuple[list[float], str, bool]:
    """x values, axis label, log scale? for the load points."""
    concs = [p.get("max_concurrency") for p in points]
    rates = [p.get("request_rate") for p in points]
    if None not in concs and len(set(concs)) == len(concs):
        return (
            [float(c) for c in concs if c is not None],
            "client max concurrency",
            True,
        )
    if None not in rates and len(set(rates)) == len(rates):
        return [float(r) for r in rates if r is not None], "request rate (req/s)", False
    return [float(i) for i in range(len(points))], "load point", False


def write_plots(raw: dict[str, Any], out_dir: Path, target_s: float) -> dict[str, str]:
    """Write the PNG plots; returns {kind: file name}.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = points_of(raw)
    xs, xlabel, logx = _x_axis(points)
    labels = [p["label"] for p in points]
    modes = list(raw.get("modes", {}))
    knees = {mode: knee(raw, mode, target_s) for mode in modes}
    written: dict[str, str] = {}

    def color(mode: str) -> str | None:
        return (
            _COLORS.get(mode.split(":", 1)[0])
            if modes.count(mode) == 1 and len(modes) <= 2
            else None
        )

    def series(mode: str, key: str, scale: float = 1.0) -> list[float]:
        values = []
        for p in points:
            run = run_for(raw, mode, p["label"])
            v = ((run or {}).get("metrics") or {}).get(key) if run_ok(run) else None
            values.append(math.nan if v is None else v * scale)
        return values

    def style_x(ax: Any) -> None:
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:g}" for x in xs] if xlabel != "load point" else labels, rotation=0)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)

    def mark_knee(ax: Any, mode: str, ys: list[float]) -> None:
        k = knees.get(mode)
        if k is None:
            return
        i = labels.index(k["label"])
        ax.plot(
            [xs[i]],
            [ys[i]],
            marker="*",
            markersize=16,
            color=color(mode) or "k",
            markeredgecolor="k",
            linestyle="none",
            label=f"{mode} knee ({k['label']})",
        )

    # throughput vs load
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in modes:
        out_tps = series(mode, "output_throughput")
        rps = series(mode, "request_throughput")
        axes[0].plot(xs, out_tps, marker="o", label=mode, color=color(mode))
        axes[1].plot(xs, rps, marker="o", label=mode, color=color(mode))
        mark_knee(axes[0], mode, out_tps)
    axes[0].set_ylabel("output tokens/s")
    axes[0].set_title("Output throughput")
    axes[1].set_ylabel("requests/s")
    axes[1].set_title("Request throughput")
    for ax in axes:
        style_x(ax)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["throughput"], dpi=110)
    plt.close(fig)
    written["throughput"] = PLOTS["throughput"]

    # P95 latency vs load
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for mode in modes:
        e2e = series(mode, "p95_e2el_ms", 0.001)
        axes[0].plot(xs, e2e, marker="o", label=mode, color=color(mode))
        mark_knee(axes[0], mode, e2e)
        axes[1].plot(xs, series(mode, "p95_ttft_ms"), marker="o", label=mode, color=color(mode))
        axes[2].plot(xs, series(mode, "p95_tpot_ms"), marker="o", label=mode, color=color(mode))
    axes[0].axhline(
        target_s,
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"target {target_s:g} s",
    )
    axes[0].set_ylabel("P95 end-to-end latency (s)")
    axes[0].set_title("P95 E2E latency")
    axes[1].set_ylabel("P95 TTFT (ms)")
    axes[1].set_title("P95 time to first token")
    axes[2].set_ylabel("P95 TPOT (ms)")
    axes[2].set_title("P95 time per output token")
    for ax in axes:
        style_x(ax)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["latency"], dpi=110)
    plt.close(fig)
    written["latency"] = PLOTS["latency"]

    # KV usage over time, one panel per point
    n = len(points)
    cols = min(3, max(1, n))
    rows = math.ceil(n / cols)
    fig, axes_grid = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for idx, p in enumerate(points):
        ax = axes_grid[idx // cols][idx % cols]
        for mode in modes:
            run = run_for(raw, mode, p["label"])
            ts = (run or {}).get("metrics_series") or {}
            t = ts.get("t") or []
            values = ts.get("values") or {}
            kv = values.get("vllm:kv_cache_usage_perc") or []
            ax.plot(
                t,
                [math.nan if v is None else v * 100 for v in kv],
                label=f"{mode} KV usage",
                color=color(mode),
            )
            slots = values.get("proxima:kv_slot_utilization")
            if slots and any(v is not None for v in slots):
                ax.plot(
                    t,
                    [math.nan if v is None else v * 100 for v in slots],
                    linestyle="--",
                    label=f"{mode} proxima slots",
                    color=color(mode),
                )
        ax.set_title(f"KV usage, {p['label']}")
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("% of KV pool")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for idx in range(n, rows * cols):
        axes_grid[idx // cols][idx % cols].axis("off")
    fig.tight_layout()
    fig.savefig(out_dir / PLOTS["kv"], dpi=110)
    plt.close(fig)
    written["kv"] = PLOTS["kv"]
    return written


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------


def render(
    raw: dict[str, Any],
    target_s: float,
    plots: dict[str, str] | None,
    plot_note: str = "",
) -> str:
    """The markdown report text."""
    modes = ", ".join(raw.get("modes", {}))
    lines = [
        f"# Serving A/B: {modes}",
        "",
        f"Status: {raw.get('status')}; created {raw.get('created')}.",
        "",
        "## Setup",
        "",
        *setup_section(raw),
        "",
        "## Summary",
        "",
        *summary_table(raw),
        "",
        *knee_section(raw, target_s),
        "",
    ]
    if plots:
        lines += ["## Plots", ""]
        titles = {
            "throughput": "Throughput vs load",
            "latency": "P95 latency vs load",
            "kv": "KV usage over time",
        }
        for kind, name in plots.items():
            lines += [f"![{titles[kind]}]({name})", ""]
    elif plot_note:
        lines += [f"_Plots: {plot_note}_", ""]
    lines += ["## Per load point", ""]
    for point in points_of(raw):
        lines += [f"### {point['label']}", "", *point_table(raw, point), ""]
    lines += [
        (
            "Peak KV is the highest `vllm:kv_cache_usage_perc` sampled; preemptions "
            "the increase of `vllm:num_preemptions_total` during the run."
        ),
        "",
        "## Checks",
        "",
        *checks_section(raw),
        "",
    ]
    errors = errors_section(raw)
    if errors:
        lines += ["## Errors", "", *errors, ""]
    return "\n".join(lines)


def write_report(
    raw: dict[str, Any], out_dir: Path, target_s: float = 2.0, plots: bool = True
) -> Path:
    """Write ``report.md`` (and the plots) into ``out_dir``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] | None = None
    note = ""
    if plots:
        try:
            written = write_plots(raw, out_dir, target_s)
        except ImportError:
            note = "matplotlib is not installed (pip install matplotlib); no plots written"
            print(f"warning: {note}", file=sys.stderr)
    path = out_dir / "report.md"
    path.write_text(render(raw, target_s, written, note), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: re-render a report from a raw.json."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_bench.serving.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("raw", type=Path, help="raw.json from serve_ab")
    parser.add_argument("--out", type=Path, help="output folder (default: the raw.json's)")
    parser.add_argument(
        "--p95-target",
        type=float,
        default=None,
        help="seconds (default: the run's, else 2)",
    )
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    try:
        raw = json.loads(args.raw.read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {args.raw}: {e}", file=sys.stderr)
        return 2
    target = args.p95_target or (raw.get("config") or {}).get("p95_target_s") or 2.0
    path = write_report(raw, args.out or args.raw.parent, float(target), plots=not args.no_plots)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
