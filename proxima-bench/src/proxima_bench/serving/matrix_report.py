"""Markdown report (and a ratio plot) of one or more serving-matrix runs.

``python -m proxima_bench.serving.matrix_report OUTDIR [OUTDIR...] [--out FILE]``
reads each folder's ``raw.json`` (written by :mod:`proxima_bench.serving.matrix`)
and writes one section per folder (e.g. one per model): a table with one row
per point (every mode's output tok/s, stock first, each other mode's ratio to
stock with its min-max over repeats, preemptions, P95 TTFT and P95 E2E of
every mode), the scheduler's CPU time per step where the ``proxima:*``
counters were recorded, per-class latencies of the mixed stream (and the chat
turns), the greedy parity summary, skipped points and errors.
``matrix-ratio.png`` (next to the report; needs matplotlib, skipped with a
note without it) plots the ratios per point. Runs of any number of modes
render, old two-mode ``raw.json`` files (no ``modes`` / ``ratios``) too.

Default output: ``OUTDIR/report.md`` for one folder, ``./matrix-report.md``
for several.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODES = ("stock", "proxima")  # the modes of a run that does not list its own
BASE = "stock"
STEPS, SCHEDULE, ADMISSION = (
    "proxima:steps_total",
    "proxima:schedule_seconds_total",
    "proxima:admission_seconds_total",
)
PLOT_NAME = "matrix-ratio.png"


class ReportError(ValueError):
    """A folder without a readable matrix raw.json."""


# --------------------------------------------------------------------------
# data access
# --------------------------------------------------------------------------


def load_raw(folder: Path) -> dict[str, Any]:
    """The ``raw.json`` of a matrix output folder.

    Raises:
        ReportError: missing, unreadable, or not a matrix run.
    """
    path = folder / "raw.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot read {path}: {e}") from e
    if not isinstance(raw, dict) or not str(raw.get("schema", "")).startswith("proxima-matrix/"):
        raise ReportError(f"{path} is not a matrix raw.json (schema {raw.get('schema')!r})")
    return raw


def point_names(raw: dict[str, Any]) -> list[str]:
    """The run's points in run order (configured ones first)."""
    names = list((raw.get("config") or {}).get("points") or [])
    for entry in raw.get("runs", []):
        if entry["point"] not in names:
            names.append(entry["point"])
    return names


def modes_of(raw: dict[str, Any]) -> list[str]:
    """The run's modes: stock first, then as configured (two-mode runs before
    ``--mode`` existed: stock, proxima), then any other mode that ran."""
    names = list((raw.get("config") or {}).get("modes") or MODES)
    for entry in raw.get("runs", []):
        names += [m for m in entry.get("modes") or {} if m not in names]
    return [BASE, *(m for m in names if m != BASE)]


def others(modes: Sequence[str]) -> list[str]:
    """The modes compared with stock (a run without ``--pair``)."""
    return [m for m in modes if m != BASE]


def bases_of(raw: dict[str, Any]) -> dict[str, str]:
    """Every compared mode's base, in mode order: the run's ``config.bases`` (``--pair``
    modes against their ``NAME-stock``), else every mode but stock against stock."""
    modes = modes_of(raw)
    stored = (raw.get("config") or {}).get("bases")
    if isinstance(stored, dict) and stored:
        return {m: str(stored[m]) for m in modes if m in stored}
    return {m: BASE for m in others(modes)}


def entries(raw: dict[str, Any], point: str) -> list[dict[str, Any]]:
    """The point's entries, one per repeat that ran."""
    return [e for e in raw.get("runs", []) if e["point"] == point]


def _metric(entry: dict[str, Any], mode: str, key: str) -> float | None:
    run = entry.get("modes", {}).get(mode) or {}
    value = (run.get("metrics") or {}).get(key)
    if value is None:
        value = (run.get("counters") or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def entry_ratio(entry: dict[str, Any], mode: str) -> float | None:
    """``mode`` / stock output tok/s of one entry: its ``ratios``, else (older
    files) its ``ratio`` for proxima, else from the two modes' metrics."""
    stored = entry.get("ratios")
    if isinstance(stored, dict):  # every compared mode's, against its own base
        value = stored.get(mode)
    elif mode == "proxima" and "ratio" in entry:
        value = entry["ratio"]
    else:
        stock = _metric(entry, BASE, "output_throughput")
        other = _metric(entry, mode, "output_throughput")
        value = other / stock if stock and other is not None else None
    return float(value) if isinstance(value, int | float) else None


def _ratio_stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "ratios": list(values),
        "ratio": _mean(values),
        "ratio_min": min(values) if values else None,
        "ratio_max": max(values) if values else None,
    }


def point_row(raw: dict[str, Any], point: str) -> dict[str, Any] | None:
    """Means over repeats of one point's figures, and its ratios (None if not run).

    Returns:
        ``repeats``, ``modes`` (:func:`modes_of`), per mode
        ``output_throughput``, ``preemptions``, ``p95_ttft_ms``,
        ``p95_e2el_ms`` and, for every compared mode (:func:`bases_of`), ``ratios``
        (mode / its base's output tok/s per repeat with both), ``ratio`` (their mean),
        ``ratio_min`` / ``ratio_max``; the top-level ``ratios`` ... are
        proxima's.
    """
    runs = entries(raw, point)
    if not runs:
        return None
    modes, bases = modes_of(raw), bases_of(raw)
    row: dict[str, Any] = {"point": point, "repeats": len(runs), "modes": modes}
    for mode in modes:
        row[mode] = {
            key: _mean([_metric(e, mode, key) for e in runs])
            for key in ("output_throughput", "preemptions", "p95_ttft_ms", "p95_e2el_ms")
        }
        if mode in bases:
            values = [r for e in runs if (r := entry_ratio(e, mode)) is not None]
            row[mode].update(_ratio_stats(values))
    row.update(_ratio_stats((row.get("proxima") or {}).get("ratios") or []))
    return row


# --------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _s(value_ms: float | None) -> str:
    return "–" if value_ms is None else f"{value_ms / 1000:.2f}"


def _pair(row: dict[str, Any], key: str, fmt: Any) -> str:
    """One figure of every mode, ``a / b / ...`` in the row's mode order."""
    return " / ".join(fmt(row[m][key]) for m in row["modes"])


def _ratio(figures: dict[str, Any]) -> str:
    """A mode's mean ratio, with the min-max over repeats when more than one."""
    if figures.get("ratio") is None:
        return "–"
    text = f"{figures['ratio']:.3f}"
    if len(figures["ratios"]) > 1:
        text += f" ({figures['ratio_min']:.3f}–{figures['ratio_max']:.3f})"
    return text


def points_table(raw: dict[str, Any]) -> list[str]:
    """The main table: one row per point that ran; a tok/s column per mode
    (stock first), a ratio column per other mode, then preemptions and P95
    latencies of every mode (``a / b / ...`` in the same order)."""
    modes, bases = modes_of(raw), bases_of(raw)
    head = [f"{m} tok/s" for m in modes] + [f"{m} / {b}" for m, b in bases.items()]
    head += ["preemptions", "P95 TTFT ms", "P95 E2E s"]
    lines = ["| point | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for name in point_names(raw):
        row = point_row(raw, name)
        if row is None:
            continue
        cells = [_num(row[m]["output_throughput"]) for m in modes]
        cells += [_ratio(row[m]) for m in bases]
        cells += [
            _pair(row, "preemptions", lambda v: _num(v, 0)),
            _pair(row, "p95_ttft_ms", _ms),
            _pair(row, "p95_e2el_ms", _s),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _proxima_counters(entry: dict[str, Any], mode: str) -> dict[str, Any]:
    run = (entry.get("modes") or {}).get(mode) or {}
    return (run.get("counters") or {}).get("proxima") or {}


def _has_cpu(entry: dict[str, Any], mode: str) -> bool:
    counters = _proxima_counters(entry, mode)
    return counters.get(STEPS) is not None and counters.get(SCHEDULE) is not None


def _per_step_ms(runs: Sequence[dict[str, Any]], mode: str, key: str) -> str:
    """Seconds of ``key`` over steps, summed over repeats, in ms per step."""
    used = [_proxima_counters(e, mode) for e in runs if _has_cpu(e, mode)]
    values = [c.get(key) for c in used]
    steps = sum(float(c[STEPS]) for c in used)
    if not used or not steps or any(not isinstance(v, int | float) for v in values):
        return "–"
    return f"{sum(values) * 1000 / steps:.3f}"


def scheduler_cpu_table(raw: dict[str, Any]) -> list[str]:
    """``proxima:schedule_seconds_total`` and ``proxima:admission_seconds_total``
    per ``proxima:steps_total`` (ms per step, over all repeats) per point and
    mode; no lines when no run recorded them (stock never does)."""
    runs = raw.get("runs", [])
    modes = [m for m in modes_of(raw) if any(_has_cpu(e, m) for e in runs)]
    if not modes:
        return []
    head = [f"{m} {what}" for m in modes for what in ("steps", "schedule", "admission")]
    lines = ["| point | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for name in point_names(raw):
        point_runs = entries(raw, name)
        if not any(_has_cpu(e, m) for e in point_runs for m in modes):
            continue
        cells = []
        for mode in modes:
            steps = [_proxima_counters(e, mode)[STEPS] for e in point_runs if _has_cpu(e, mode)]
            cells.append(_num(_mean(steps), 0))
            cells += [_per_step_ms(point_runs, mode, SCHEDULE)]
            cells += [_per_step_ms(point_runs, mode, ADMISSION)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def tail_table(raw: dict[str, Any]) -> list[str]:
    """How each run ended (:mod:`proxima_bench.serving.tail`): per point and mode, per
    repeat, the last request's finish, how long after the one before it, and which request
    it was (dataset index, input / output tokens, seconds it stalled). No lines when no run
    kept a tail (runs before it was recorded)."""
    runs = raw.get("runs", [])
    modes = modes_of(raw)
    if not any(_tail(e, m) for e in runs for m in modes):
        return []
    lines = [
        (
            "| point | mode | per repeat: last done s (after the one before; the request); "
            "tok/s until the P90 finish |"
        ),
        "|---|---|---|",
    ]
    for name in point_names(raw):
        point_runs = entries(raw, name)
        for mode in modes:
            cells = [_tail_cell(_tail(e, mode)) for e in point_runs]
            if any(c != "–" for c in cells):
                lines.append(f"| {name} | {mode} | " + "; ".join(cells) + " |")
    return lines


def _tail(entry: dict[str, Any], mode: str) -> dict[str, Any] | None:
    tail: dict[str, Any] | None = ((entry.get("modes") or {}).get(mode) or {}).get("tail")
    return tail


def _tail_cell(tail: dict[str, Any] | None) -> str:
    if not tail or not tail.get("last"):
        return "–"
    last = tail["last"][0]
    rate = tail.get("until_p90_tok_s")
    return (
        f"{tail['end_s']['max']:.1f} (+{tail['last_gap_s']:.1f}; #{last['index']} "
        f"{last['input']}/{last['output']}, stalled {last['stalled_s']:.1f} s)"
        + (f", {rate:,.1f}" if rate is not None else "")
    )


def class_tables(raw: dict[str, Any]) -> list[str]:
    """Per-class latencies (mixed: short / long; chat: per turn), means over repeats."""
    lines: list[str] = []
    modes = modes_of(raw)
    for name in point_names(raw):
        runs = [e for e in entries(raw, name) if any(_classes(e, m) for m in modes)]
        if not runs:
            continue
        kinds = sorted({k for e in runs for m in modes for k in _classes(e, m)})
        lines += [
            f"### {name}: per class ({' / '.join(modes)})",
            "",
            "| class | requests | P50 TTFT ms | P95 TTFT ms | P50 E2E s | P95 E2E s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for kind in kinds:
            counts = [_class_stat(runs, m, kind, "requests") for m in modes]
            count = next((c for c in counts if c is not None), None)
            cells = [
                " / ".join(fmt(_class_stat(runs, m, kind, key)) for m in modes)
                for key, fmt in (
                    ("p50_ttft_ms", _ms),
                    ("p95_ttft_ms", _ms),
                    ("p50_e2el_ms", _s),
                    ("p95_e2el_ms", _s),
                )
            ]
            lines.append(f"| {kind} | {_num(count, 0)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _classes(entry: dict[str, Any], mode: str) -> dict[str, Any]:
    return ((entry.get("modes") or {}).get(mode) or {}).get("classes") or {}


def _class_stat(runs: Sequence[dict[str, Any]], mode: str, kind: str, key: str) -> float | None:
    return _mean([(_classes(e, mode).get(kind) or {}).get(key) for e in runs])


def parity_lines(raw: dict[str, Any]) -> list[str]:
    """The greedy parity summary, one bullet per repeat and mode compared with
    stock (proxima's in ``parity``, the others' in ``parity_vs_stock``)."""
    lines: list[str] = []
    bases = bases_of(raw)
    for entry in entries(raw, "parity"):
        extra = entry.get("parity_vs_stock") or {}
        compared = {"proxima": entry.get("parity"), **extra}
        for mode, p in compared.items():
            base = bases.get(mode, BASE)
            label = f"repeat {entry['repeat']}" + (f", {mode} vs {base}" if extra else "")
            if p:
                lines += _parity_bullet(label, p)
            elif mode == "proxima":
                lines.append(f"- {label}: not compared (a mode is missing)")
    return lines


def _parity_bullet(label: str, p: dict[str, Any]) -> list[str]:
    gap = p.get("max_divergence_gap")
    lines = [
        f"- {label}: **{p['identical']}/{p['compared']} requests "
        f"identical**; token agreement {_pct(p['token_agreement'])} (tokens before "
        f"the first divergence / all tokens), position-wise "
        f"{_pct(p['positionwise_agreement'])}; {p['divergences']} divergence(s), "
        f"{p['near_tie_divergences']} at near-ties (stock top-1 − top-2 < "
        f"{p['near_tie_nats']} nats), largest gap "
        + ("–" if gap is None else f"{gap:.4f} nats")
        + (f"; {p['failed']} request(s) failed" if p.get("failed") else "")
    ]
    shown = p.get("diverging", [])[:10]
    if shown:
        lines.append(
            "  - first divergences (request@position: stock gap): "
            + ", ".join(
                f"{d['request']}@{d['position']}: "
                + ("–" if d["stock_gap"] is None else f"{d['stock_gap']:.4f}")
                for d in shown
            )
        )
    return lines


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.2f} %"


def setup_lines(raw: dict[str, Any], folder: Path) -> list[str]:
    """Model, servers, machine and run facts."""
    cfg = raw.get("config") or {}
    machine = raw.get("machine") or {}
    gpus = ", ".join(g.get("name", "?") for g in machine.get("gpus") or []) or "none"
    git = raw.get("git") or {}
    start = raw.get("start") or {}
    lines = [
        f"- folder `{folder}`, created {raw.get('created')}, status **{raw.get('status')}**",
        f"- model `{cfg.get('model')}`; server args `{' '.join(cfg.get('server_args') or [])}`",
        (
            f"- mode args: {json.dumps(cfg.get('mode_args') or {})}; scale {cfg.get('scale')}, "
            f"repeats {cfg.get('repeats')}, budget "
            + (f"{cfg['budget_s']:g} s" if cfg.get("budget_s") else "none")
        ),
        (
            f"- machine: {machine.get('cpu')} ({machine.get('cpu_count')} CPUs), GPUs: {gpus}; "
            f"vLLM {(machine.get('packages') or {}).get('vllm')}, git "
            f"{str(git.get('commit', '?'))[:10]}{' (dirty)' if git.get('dirty') else ''}"
        ),
        f"- servers started {start.get('method', '?')}"
        + (" (the concurrent start failed first)" if start.get("concurrent_error") else ""),
    ]
    for mode in modes_of(raw):
        s = (raw.get("servers") or {}).get(mode) or {}
        facts = s.get("log_facts") or {}
        lines.append(
            f"  - {mode}: started {s.get('started_at')}, ready in {s.get('startup_s')} s, "
            f"proxima {facts.get('mode', '?')}, KV {facts.get('kv_cache_size_tokens', '?')} "
            f"tokens, exit code {s.get('exit_code')}"
        )
    return lines


def problem_lines(raw: dict[str, Any]) -> list[str]:
    """Skipped points, failed runs and failed checks."""
    lines = [
        f"- skipped {s['point']} (repeat {s['repeat']}"
        + (f", {s['mode']}" if s.get("mode") else "")
        + f"): {s['reason']}"
        for s in raw.get("skipped", [])
    ]
    for entry in raw.get("runs", []):
        for mode, run in (entry.get("modes") or {}).items():
            tag = f"{entry['point']} (repeat {entry['repeat']}, {mode})"
            if run.get("error"):
                lines.append(f"- {tag}: error: {run['error'].splitlines()[0][:300]}")
            checks = run.get("checks") or {}
            if checks and not checks.get("all_completed"):
                lines.append(f"- {tag}: not every request completed")
            if checks.get("client_prompt_len_mismatches"):
                lines.append(
                    f"- {tag}: {checks['client_prompt_len_mismatches']} prompt lengths off"
                )
    if raw.get("error"):
        lines.append(f"- run error: {str(raw['error']).splitlines()[0][:300]}")
    return lines


def section(raw: dict[str, Any], folder: Path, heading: str) -> list[str]:
    """One model's section."""
    lines = [f"## {heading}", "", *setup_lines(raw, folder), ""]
    lines += [
        (
            "Output tokens/s per point (mean over repeats), ratio = mode / stock "
            "(min–max over repeats when more than one); preemptions and P95 latencies "
            f"are means over repeats, {' / '.join(modes_of(raw))}."
        ),
        "",
        *points_table(raw),
        "",
    ]
    cpu = scheduler_cpu_table(raw)
    if cpu:
        lines += [
            "### Scheduler CPU per step (ms)",
            "",
            (
                "Per mode: scheduler steps (`proxima:steps_total`, mean over repeats), "
                "then `proxima:schedule_seconds_total` and `proxima:admission_seconds_total` "
                "per step in ms (all repeats' seconds / all repeats' steps)."
            ),
            "",
            *cpu,
            "",
        ]
    ends = tail_table(raw)
    if ends:
        lines += [
            "### How the runs ended",
            "",
            (
                "The last request's finish (s from the first start), how long after the one "
                "before it, and which it was: dataset index, input/output tokens, seconds its "
                "stream stalled (gaps over 0.2 s); then the output tok/s up to the P90 finish, "
                "the rate before the tail. A gap in tok/s that is one request's shows here: "
                "the rates before the tail are equal."
            ),
            "",
            *ends,
            "",
        ]
    lines += class_tables(raw)
    parity = parity_lines(raw)
    if parity:
        lines += ["### Greedy parity", "", *parity, ""]
    problems = problem_lines(raw)
    if problems:
        lines += ["### Skipped and failed", "", *problems, ""]
    return lines


def _heading(raw: dict[str, Any], folder: Path) -> str:
    model = Path(str((raw.get("config") or {}).get("model") or folder)).name
    return f"{model} ({folder.name})"


def render(runs: Sequence[tuple[Path, dict[str, Any]]], plot: str | None, note: str = "") -> str:
    """The whole report.md text."""
    lines = ["# Serving matrix: stock vs proxima", ""]
    if plot:
        lines += [f"![mode / stock output tok/s per point]({plot})", ""]
    if note:
        lines += [f"_{note}_", ""]
    for folder, raw in runs:
        lines += section(raw, folder, _heading(raw, folder))
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------
# plot
# --------------------------------------------------------------------------


def write_plot(runs: Sequence[tuple[Path, dict[str, Any]]], path: Path) -> bool:
    """Bars of the ratios per point (one colour per folder and mode compared
    with stock, min-max whiskers).

    Returns:
        False when there is nothing to plot.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    for _folder, raw in runs:
        names += [n for n in point_names(raw) if n not in names]
    # one bar series per (folder, mode compared with stock)
    series: list[tuple[str, dict[str, dict[str, Any] | None]]] = []
    for folder, raw in runs:
        rows = {n: point_row(raw, n) for n in names}
        bases = bases_of(raw)  # a --pair's stock servers are bases, not compared
        compared = list(bases)
        for mode in compared:
            label = _heading(raw, folder)
            if compared != ["proxima"]:
                label += f": {mode}" + (f" / {bases[mode]}" if bases[mode] != BASE else "")
            series.append((label, {n: r[mode] if r else None for n, r in rows.items()}))
    values = [f["ratio"] for _l, by in series for f in by.values() if f and f["ratio"] is not None]
    if not values:
        return False
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(names) * max(1, len(series) / 2) + 2), 4.2))
    for k, (label, by_name) in enumerate(series):
        xs, ys, lo, hi = [], [], [], []
        for i, name in enumerate(names):
            fig_row = by_name[name]
            if fig_row is None or fig_row["ratio"] is None:
                continue
            xs.append(i - 0.4 + width * (k + 0.5))
            ys.append(fig_row["ratio"])
            lo.append(fig_row["ratio"] - fig_row["ratio_min"])
            hi.append(fig_row["ratio_max"] - fig_row["ratio"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_ylabel("mode / stock output tok/s")
    ax.set_ylim(min(0.8, min(values) - 0.05), max(1.2, max(values) + 0.05))
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(folders: Sequence[Path], out: Path | None = None, plots: bool = True) -> Path:
    """Write the report (and the plot next to it); returns the report's path.

    Raises:
        ReportError: a folder has no matrix raw.json.
    """
    if not folders:
        raise ReportError("give at least one matrix output folder")
    runs = [(Path(f), load_raw(Path(f))) for f in folders]
    if out is None:
        out = runs[0][0] / "report.md" if len(runs) == 1 else Path("matrix-report.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    plot, note = None, ""
    if plots:
        try:
            if write_plot(runs, out.parent / PLOT_NAME):
                plot = PLOT_NAME
        except ImportError:
            note = "matplotlib is not installed (pip install matplotlib); no plot written"
            print(f"warning: {note}", file=sys.stderr)
    out.write_text(render(runs, plot, note), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_bench.serving.matrix_report",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("folders", type=Path, nargs="+", metavar="OUTDIR")
    parser.add_argument("--out", type=Path, help="report file (see the module doc)")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.folders, args.out, plots=not args.no_plots)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
