"""The tables of README.md from tail.jsonl: steps per variant / stock's per seed, and mean
requests running per tenth of the run.

    python3 docs/benchmarks/cpu-longout-tail-2026-12-07/table.py \
        docs/benchmarks/cpu-longout-tail-2026-12-07/tail.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main() -> None:
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f]
    by = {(r["kv_slots"], r["seed"], r["variant"]): r for r in rows}
    kvs = sorted({r["kv_slots"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    print(
        "| pool | variant | steps / stock's, per seed | mean | preemptions (mean) "
        "| prefill tokens (mean) |"
    )
    print("|---:|---|---|---:|---:|---:|")
    for kv in kvs:
        for v in variants:
            ratios = [by[kv, s, v]["steps"] / by[kv, s, "stock"]["steps"] for s in seeds]
            pre = sum(by[kv, s, v]["preemptions"] for s in seeds) / len(seeds)
            pf = sum(by[kv, s, v]["prefill_tokens"] for s in seeds) / len(seeds)
            print(
                f"| {kv:,} | {v} | {', '.join(f'{x:.3f}' for x in ratios)} | "
                f"{sum(ratios) / len(ratios):.3f} | {pre:.0f} | {pf:,.0f} |"
            )
    print()
    print("| pool | variant | mean running per tenth of the run (mean over seeds) |")
    print("|---:|---|---|")
    for kv in kvs:
        for v in ("stock", "proxima"):
            dec: dict[int, float] = defaultdict(float)
            for s in seeds:
                for q, x in enumerate(by[kv, s, v]["running_by_decile"]):
                    dec[q] += x / len(seeds)
            print(f"| {kv:,} | {v} | {', '.join(f'{dec[q]:.1f}' for q in range(10))} |")


if __name__ == "__main__":
    main()
