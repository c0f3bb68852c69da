"""Tables and plots for an engine A/B run directory (``engine_ab`` + ``kernels`` output).

``python -m proxima_bench.engine.report docs/benchmarks/h200-2026-12-03`` reads every
``plan-*/results.jsonl``, ``plan-*/engines.jsonl`` and ``plan-*/kernels.jsonl`` under the folder
and writes ``tables.md`` and PNG plots beside them. Nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

ENGINE_COLS = [
    ("plan", "plan"),
    ("engine", "engine"),
    ("run", "run"),
    ("kv_capacity_tokens", "KV slots"),
    ("output_tok_per_s", "output tok/s"),
    ("req_per_s", "req/s"),
    ("wall_s", "wall s"),
    ("preemptions", "preemptions"),
    ("recomputed_tokens", "recomputed tokens"),
    ("running_max", "running max"),
    ("running_time_weighted_mean", "running tw-mean"),
    ("slot_use_peak", "slot use at peak"),
    ("slot_use_mean", "slot use mean"),
    ("latency_p50_s", "latency P50 s"),
    ("latency_p95_s", "latency P95 s"),
    ("ttft_p50_s", "TTFT P50 s"),
    ("ttft_p95_s", "TTFT P95 s"),
    ("schedule_ms_per_step", "schedule() ms/step"),
]


PREFIX_COLS = [
    ("plan", "plan"),
    ("engine", "engine"),
    ("run", "run"),
    ("kv_capacity_tokens", "KV slots"),
    ("prompt_tokens", "prompt tokens"),
    ("prompt_tokens_cached", "cached"),
    ("prompt_tokens_computed", "computed"),
    ("hit_rate", "hit rate"),
    ("prefix_evicted_slots", "evicted slots"),
    ("preemptions", "preemptions"),
    ("output_tok_per_s", "output tok/s"),
    ("ttft_p50_s", "TTFT P50 s"),
    ("ttft_p95_s", "TTFT P95 s"),
]
STEP_COLS = [
    ("plan", "plan"),
    ("engine", "engine"),
    ("run", "run"),
    ("num_steps", "steps"),
    ("ms_per_step", "wall ms/step"),
    ("schedule_ms_per_step", "schedule() ms/step"),
    ("running_time_weighted_mean", "running tw-mean"),
]


def prefix_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs with prefix caching on, with the hit rate (cached / prompt tokens) added."""
    out = []
    for r in rows:
        if not r.get("prefix_caching") or not r.get("prompt_tokens"):
            continue
        out.append({**r, "hit_rate": f"{r['prompt_tokens_cached'] / r['prompt_tokens']:.2%}"})
    return out


def step_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wall time per engine step: tok/s = steps x time per step, so a gap splits in two."""
    return [
        {**r, "ms_per_step": 1000 * r["wall_s"] / r["num_steps"]}
        for r in rows
        if r.get("num_steps") and r.get("wall_s")
    ]


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.4f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(rows: list[dict[str, Any]], cols: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(h for _, h in cols) + " |"
    sep = "|" + "---|" * len(cols)
    body = ["| " + " | ".join(fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def kernel_table(rows: list[dict[str, Any]]) -> str:
    """One row per (ctx, batch): ms of each variant and the ratios the brief asks for."""
    by: dict[tuple[str, int], dict[str, float]] = {}
    for r in rows:
        if not r.get("ok"):
            continue
        key = (r["ctx"], r["batch"])
        by.setdefault(key, {})[f"{r['kernel']}/{r['page']}/{r['slots']}"] = r["ms"]
    header = (
        "| context | seqs | Triton p16 ms | Triton p1 contiguous ms | Triton p1 scattered ms "
        "| FA3 p16 ms | FA3 p1 ms | Triton p1 / Triton p16 | Triton p1 / FA3 p16 "
        "| FA3 p1 / FA3 p16 |"
    )
    out = [
        header,
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (ctx, b), m in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        t16, t1 = m.get("triton/16/contiguous"), m.get("triton/1/contiguous")
        ts, f16, f1 = (
            m.get("triton/1/scattered"),
            m.get("fa3/16/contiguous"),
            m.get("fa3/1/contiguous"),
        )

        def ratio(a: float | None, b_: float | None) -> str:
            return f"{a / b_:.3f}" if a and b_ else "–"

        out.append(
            f"| {ctx} | {b} | {fmt(t16)} | {fmt(t1)} | {fmt(ts)} | {fmt(f16)} | {fmt(f1)} "
            f"| {ratio(t1, t16)} | {ratio(t1, f16)} | {ratio(f1, f16)} |"
        )
    return "\n".join(out)


def plot_running(folder: Path, out: Path, pairs: list[tuple[str, str, str]]) -> bool:
    """Running requests over time for (plan, steps file stem, label)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    found = [
        (folder / f"plan-{plan}" / "steps" / f"steps_{stem}.json.gz", label)
        for plan, stem, label in pairs
    ]
    found = [(path, label) for path, label in found if path.exists()]
    if not found:
        return False
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for path, label in found:
        steps = json.loads(gzip.decompress(path.read_bytes()))["steps"]
        t = [s[0] for s in steps]
        axes[0].plot(t, [s[1] for s in steps], label=label, lw=0.8)
        axes[1].plot(t, [s[3] for s in steps], label=label, lw=0.8)
    axes[0].set_ylabel("running requests")
    axes[1].set_ylabel("KV slots in use")
    axes[1].set_xlabel("seconds since the requests were submitted")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_throughput(
    rows: list[dict[str, Any]], out: Path, title: str, min_requests: int = 1000
) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in rows if r.get("output_tok_per_s") and r.get("requests", 0) >= min_requests]
    if not rows:
        return False
    labels = [f"{r['plan']}:{r['engine']}\n{r['run']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4))
    colors = ["tab:blue" if r["engine"].startswith("stock") else "tab:orange" for r in rows]
    ax.bar(range(len(rows)), [r["output_tok_per_s"] for r in rows], color=colors)
    ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=0)
    ax.set_ylabel("output tok/s")
    ax.set_title(f"{title} (blue: stock, orange: proxima)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--title",
        default="H200, Llama-2-7B shape, 8 GiB KV, 1,000 requests",
        help="the throughput plot's title",
    )
    parser.add_argument(
        "--min-requests", type=int, default=1000, help="runs smaller than this stay off the plot"
    )
    parser.add_argument(
        "--running",
        action="append",
        metavar="PLAN:STEM:LABEL",
        help="a steps file (plan-PLAN/steps/steps_STEM.json.gz) for the running-requests plot",
    )
    args = parser.parse_args(argv)
    folder: Path = args.folder
    rows: list[dict[str, Any]] = []
    engines: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    for plan_dir in sorted(p for p in folder.glob("plan-*") if p.is_dir()):
        plan = plan_dir.name.removeprefix("plan-")
        rows += [{"plan": plan, **r} for r in load_jsonl(plan_dir / "results.jsonl")]
        engines += [{"plan": plan, **r} for r in load_jsonl(plan_dir / "engines.jsonl")]
        kernels += load_jsonl(plan_dir / "kernels.jsonl")
    parts = ["# Engine A/B tables (generated by `python -m proxima_bench.engine.report`)", ""]
    parts += ["## Engines", ""]
    parts.append(
        table(
            engines,
            [
                ("plan", "plan"),
                ("engine", "engine"),
                ("attention_backend", "attention backend"),
                ("block_size", "block"),
                ("kv_capacity_tokens", "KV slots"),
                ("scheduler_cls", "scheduler"),
                ("init_s", "engine start s"),
            ],
        )
    )
    parts += ["", "## Runs", ""]
    parts.append(table([r for r in rows if r.get("status") == "ok"], ENGINE_COLS))
    prefix = prefix_rows([r for r in rows if r.get("status") == "ok"])
    if prefix:
        parts += ["", "## Prefix caching", ""]
        parts.append(table(prefix, PREFIX_COLS))
        parts += [
            "",
            (
                "Prompt tokens count each request's prompt once; cached = its `num_cached_tokens` "
                "at first scheduling, computed = prompt - cached. Recomputation after a preemption "
                "is not in these columns (see `recomputed tokens` above)."
            ),
        ]
    steps = step_rows([r for r in rows if r.get("status") == "ok"])
    if steps:
        parts += ["", "## Steps and time per step", ""]
        parts.append(table(steps, STEP_COLS))
    if kernels:
        parts += ["", "## Decode attention, one layer (Llama-2-7B heads, bf16)", ""]
        parts.append(kernel_table(kernels))
    ok = [r for r in rows if r.get("status") == "ok"]
    if plot_throughput(ok, folder / "throughput.png", args.title, args.min_requests):
        parts += ["", "![output tok/s](throughput.png)"]
    pairs = [tuple(spec.split(":", 2)) for spec in args.running or []] or [
        ("c", "stock-fa3_base", "stock FA3 (plan c)"),
        ("b", "proxima_base-adaptive", "proxima adaptive (plan b)"),
    ]
    if plot_running(folder, folder / "running.png", pairs):  # type: ignore[arg-type]
        parts += ["", "![running requests and slots in use](running.png)"]
    (folder / "tables.md").write_text("\n".join(parts) + "\n")
    print(f"wrote {folder / 'tables.md'}")


if __name__ == "__main__":
    main()
