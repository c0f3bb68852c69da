"""Markdown tables from ``bench/kernels.py``'s timing matrix (no torch, no GPU).

``python -m proxima_bench.kernels.report kernels.jsonl --out kernels.md`` writes, for
docs/benchmarks, one table per shape and phase (FA3 over 16-token pages in ms, every other
variant as a ratio to it), a summary per shape and phase (geometric-mean ratio and the worst
case) and the numerical check against the torch reference. ``kernels.py`` prints the same
summary lines at the end of a run; both read rows through the functions here.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Row = dict[str, Any]

BASE = "fa3/16/scattered"
"""Stock's default on Hopper: FlashAttention 3 over 16-token pages from a churned pool."""

VARIANTS: tuple[str, ...] = (
    BASE,
    "fa3/1/scattered",
    "fa3/1/contiguous",
    "triton/16/scattered",
    "triton/1/scattered",
    "triton/1/contiguous",
)
"""Every kernel/page/layout the matrix times, stock's default first."""

LABELS: dict[str, str] = {
    BASE: "FA3-16",
    "fa3/1/scattered": "FA3-1 scat",
    "fa3/1/contiguous": "FA3-1 contig",
    "triton/16/scattered": "Triton-16",
    "triton/1/scattered": "Triton-1 scat",
    "triton/1/contiguous": "Triton-1 contig",
}

SHORT: dict[str, str] = {
    BASE: "FA3-16",
    "fa3/1/scattered": "FA3-1s",
    "fa3/1/contiguous": "FA3-1c",
    "triton/16/scattered": "Tri-16",
    "triton/1/scattered": "Tri-1s",
    "triton/1/contiguous": "Tri-1c",
}
"""Column heads of ``kernels.py``'s stdout table."""

CaseKey = tuple[str, str, int, int, int]


@dataclass(frozen=True)
class Summary:
    """One variant's ratios to ``BASE`` over the cases of one shape and phase."""

    shape: str
    phase: str
    variant: str
    cases: int
    geomean: float
    worst: float
    worst_case: str


def load_rows(path: Path) -> list[Row]:
    """Read a JSONL file, skipping blank lines.

    Args:
        path: The file ``kernels.py --out`` wrote.

    Returns:
        One dict per line.
    """
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def variant_of(row: Row) -> str:
    """``kernel/page/layout`` of a row, e.g. ``fa3/1/contiguous``."""
    return f"{row['kernel']}/{row['page']}/{row['layout']}"


def case_of(row: Row) -> CaseKey:
    """(shape, phase, batch, ctx, q_len): what all variants of one case share."""
    return (row["shape"], row["phase"], int(row["batch"]), int(row["ctx"]), int(row["q_len"]))


def case_label(key: CaseKey) -> str:
    """Short text for a case: ``b512 ctx4096`` (decode) or ``b4 q512 ctx2048`` (prefill)."""
    _, phase, batch, ctx, q_len = key
    return f"b{batch} ctx{ctx}" if phase == "decode" else f"b{batch} q{q_len} ctx{ctx}"


def timed(rows: Iterable[Row]) -> list[Row]:
    """Rows of the timed matrix (not the small check cases) that ran and passed the check."""
    return [r for r in rows if not r.get("check") and r.get("ok") and r.get("ms")]


def ms_by_case(rows: Iterable[Row]) -> dict[CaseKey, dict[str, float]]:
    """Median ms per case and variant, from ``timed`` rows (a later duplicate wins)."""
    out: dict[CaseKey, dict[str, float]] = {}
    for r in timed(rows):
        out.setdefault(case_of(r), {})[variant_of(r)] = float(r["ms"])
    return out


def ratios(ms: dict[str, float]) -> dict[str, float]:
    """Each variant's time over ``BASE``'s in one case; empty when ``BASE`` is missing."""
    base = ms.get(BASE)
    if not base:
        return {}
    return {v: t / base for v, t in ms.items() if v != BASE}


def geomean(values: list[float]) -> float:
    """Geometric mean of positive numbers (``nan`` for none)."""
    if not values:
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: Iterable[Row]) -> list[Summary]:
    """Per shape, phase and non-base variant: geometric-mean ratio to ``BASE`` and worst case.

    Args:
        rows: Rows as ``kernels.py`` writes them.

    Returns:
        Summaries in first-seen shape/phase order, variants in ``VARIANTS`` order.
    """
    groups: dict[tuple[str, str], dict[str, list[tuple[float, CaseKey]]]] = {}
    for key, ms in ms_by_case(rows).items():
        group = groups.setdefault((key[0], key[1]), {})
        for variant, ratio in ratios(ms).items():
            group.setdefault(variant, []).append((ratio, key))
    out = []
    for (shape, phase), group in groups.items():
        for variant in VARIANTS[1:]:
            pairs = group.get(variant)
            if not pairs:
                continue
            worst, worst_key = max(pairs)
            out.append(
                Summary(
                    shape=shape,
                    phase=phase,
                    variant=variant,
                    cases=len(pairs),
                    geomean=geomean([p[0] for p in pairs]),
                    worst=worst,
                    worst_case=case_label(worst_key),
                )
            )
    return out


def summary_lines(rows: Iterable[Row]) -> list[str]:
    """One text line per shape and phase: each variant's geomean ratio and worst case."""
    by: dict[tuple[str, str], list[Summary]] = {}
    for s in summarize(rows):
        by.setdefault((s.shape, s.phase), []).append(s)
    lines = []
    for (shape, phase), sums in by.items():
        parts = [
            f"{LABELS[s.variant]} {s.geomean:.3f} (worst {s.worst:.3f} @ {s.worst_case})"
            for s in sums
        ]
        n = max(s.cases for s in sums)
        lines.append(f"SUMMARY {shape} {phase} ({n} cases) vs FA3-16: " + "; ".join(parts))
    return lines


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _md_table(header: list[str], body: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in body),
    ]


def summary_markdown(rows: list[Row]) -> list[str]:
    """The per-shape/phase summary as a markdown table."""
    by: dict[tuple[str, str], dict[str, Summary]] = {}
    for s in summarize(rows):
        by.setdefault((s.shape, s.phase), {})[s.variant] = s
    header = ["shape", "phase", "cases", *(LABELS[v] for v in VARIANTS[1:])]
    body = []
    for (shape, phase), sums in by.items():
        cells = []
        for v in VARIANTS[1:]:
            s = sums.get(v)
            cells.append(
                "–" if s is None else f"{s.geomean:.3f} (worst {s.worst:.3f}, {s.worst_case})"
            )
        body.append([shape, phase, str(max(s.cases for s in sums.values())), *cells])
    return _md_table(header, body)


def case_markdown(rows: list[Row]) -> list[str]:
    """One table per shape and phase: FA3-16 ms and every other variant's ratio to it."""
    out: list[str] = []
    groups: dict[tuple[str, str], list[tuple[CaseKey, dict[str, float]]]] = {}
    for key, ms in ms_by_case(rows).items():
        groups.setdefault((key[0], key[1]), []).append((key, ms))
    for (shape, phase), cases in groups.items():
        out += ["", f"### {shape}, {phase}", ""]
        header = ["seqs", "ctx", "q/seq", "FA3-16 ms", *(LABELS[v] for v in VARIANTS[1:])]
        body = []
        for key, ms in sorted(cases, key=lambda kv: (kv[0][2], kv[0][3], kv[0][4])):
            rat = ratios(ms)
            body.append(
                [
                    str(key[2]),
                    str(key[3]),
                    str(key[4]),
                    _fmt(ms.get(BASE), 4),
                    *(_fmt(rat.get(v)) for v in VARIANTS[1:]),
                ]
            )
        out += _md_table(header, body)
    return out


def check_markdown(rows: list[Row]) -> list[str]:
    """Largest abs error vs the torch reference per shape and variant, and every failure."""
    worst: dict[str, dict[str, float]] = {}
    failures = []
    for r in rows:
        err = r.get("max_abs_err")
        if err is not None:
            cell = worst.setdefault(r["shape"], {})
            cell[variant_of(r)] = max(cell.get(variant_of(r), 0.0), float(err))
        if not r.get("ok"):
            why = r.get("error") or f"max abs err {_fmt(err, 4)}"
            what = f"{r['shape']} {r['phase']} {case_label(case_of(r))}"
            if r.get("check"):
                what += " (check case)"
            failures.append(f"- {what} {variant_of(r)}: {why}")
    header = ["shape", *(LABELS[v] for v in VARIANTS)]
    body = [[shape, *(_fmt(errs.get(v), 4) for v in VARIANTS)] for shape, errs in worst.items()]
    out = _md_table(header, body)
    out += ["", f"Failures: {len(failures)}", *failures]
    return out


def markdown(rows: list[Row], source: str = "") -> str:
    """The whole report: summary, per-case tables, numerical check.

    Args:
        rows: Rows as ``kernels.py`` writes them.
        source: Where the rows came from, named in the heading's note.

    Returns:
        Markdown text ending in a newline.
    """
    devices = ", ".join(sorted({str(r["device"]) for r in rows if r.get("device")}))
    where = (f" from `{source}`" if source else "") + (f" on {devices}" if devices else "")
    note = (
        f"{len(rows)} rows{where}. "
        "Times are medians per attention call (one layer) with CUDA graphs replaying "
        "several KV replicas so the KV is not L2-resident; ratios are each variant's time over "
        "FA3 over 16-token pages (stock's default on Hopper), so above 1 is slower. "
        "scat = a request's pages are a random draw from the pool (a churned allocator); "
        "contig = each request's 1-token slots are one contiguous run."
    )
    eager = [r for r in timed(rows) if r.get("graphed") is False]
    if eager:
        note += f" {len(eager)} timed rows ran without a CUDA graph (launch overhead included)."
    parts = ["## Attention kernel timing matrix (`proxima_bench.kernels.bench`)", "", note, ""]
    parts += ["### Summary: geometric-mean ratio to FA3-16 over the cases (worst case)", ""]
    parts += summary_markdown(rows)
    parts += case_markdown(rows)
    parts += ["", "### Numerical check: max abs error vs a float32 torch reference", ""]
    parts += check_markdown(rows)
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> None:
    """CLI: read the JSONL, write the markdown to ``--out`` or stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", type=Path, help="rows written by bench.kernels --out")
    parser.add_argument("--out", type=Path, default=None, help="markdown file (default stdout)")
    args = parser.parse_args(argv)
    text = markdown(load_rows(args.jsonl), source=args.jsonl.name)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
