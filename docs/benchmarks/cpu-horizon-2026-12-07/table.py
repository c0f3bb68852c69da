"""README.md's table from horizon.jsonl: steps / stock's per seed and their mean, mean
preemptions and prefill tokens, per workload, pool and horizon.

    python3 docs/benchmarks/cpu-horizon-2026-12-07/table.py \\
        docs/benchmarks/cpu-horizon-2026-12-07/horizon.jsonl
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    with open(sys.argv[1]) as f:
        rows = [json.loads(line) for line in f]
    by = {(r["workload"], r["kv_slots"], r["seed"], r["horizon"]): r for r in rows}
    keys = list(dict.fromkeys((r["workload"], r["kv_slots"]) for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    horizons = list(dict.fromkeys(r["horizon"] for r in rows))
    print(
        "| workload | pool | horizon | steps / stock's per seed | mean | preemptions "
        "| prefill tokens |"
    )
    print("|---|---:|---|---|---:|---:|---:|")
    for workload, kv in keys:
        for h in horizons:
            have = [s for s in seeds if (workload, kv, s, h) in by]
            if not have:
                continue
            ratios = [
                by[workload, kv, s, h]["steps"] / by[workload, kv, s, None]["steps"] for s in have
            ]
            pre = sum(by[workload, kv, s, h]["preemptions"] for s in have) / len(have)
            pf = sum(by[workload, kv, s, h]["prefill_tokens"] for s in have) / len(have)
            label = "stock" if h is None else str(h)
            print(
                f"| {workload} | {kv:,} | {label} | {', '.join(f'{x:.3f}' for x in ratios)} | "
                f"{sum(ratios) / len(ratios):.3f} | {pre:.0f} | {pf:,.0f} |"
            )


if __name__ == "__main__":
    main()
