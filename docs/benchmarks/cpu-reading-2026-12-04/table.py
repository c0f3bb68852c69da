"""The README's table from reading.jsonl: per point, the outcome of each code (steps,
preemptions, mean running) and its admission CPU per step (min-max over rounds), and
the kept reading's admission CPU against the code before (mean ratio).
usage: python table.py reading.jsonl"""

import json
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1])]
points: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
for r in rows:
    key = (r["model"].split("/")[-1], r["slots"], r["requests"], r["workload"], tuple(r["output"]),
           r.get("max_tokens_factor", 1.0),
           r["prefix_caching"], r["policy"])
    points[key][r["code"]].append(r)
print("| model | pool (tokens) | requests | workload | output | max_tokens / output | caching | policy | outcome: steps / "
      "preemptions / mean running (base, every-1, every-8) | admission us/step base | every-1 | "
      "every-8 | every-8 / base |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key, codes in points.items():
    outcomes = []
    for code in ("base", "every-1", "every-8"):
        seen = {(r["steps"], r["preemptions"], r["running_mean"]) for r in codes[code]}
        outcomes.append(" or ".join(f"{s} / {p} / {m}" for s, p, m in sorted(seen)))
    same = len(set(outcomes)) == 1
    outcome = outcomes[0] + " (all three)" if same else "; ".join(outcomes)

    def span(code: str) -> str:
        v = [r["admission_us_per_step"] for r in codes[code]]
        return f"{min(v):.0f}-{max(v):.0f}" if len(v) > 1 else f"{v[0]:.0f}"

    def mean(code: str) -> float:
        v = [r["admission_us_per_step"] for r in codes[code]]
        return sum(v) / len(v)

    model, slots, n, kind, out, factor, caching, policy = key
    print(f"| {model} | {slots:,} | {n:,} | {kind} | {out[0]}-{out[1]} | {factor:g} | {caching} | {policy} | "
          f"{outcome} | {span('base')} | {span('every-1')} | {span('every-8')} | "
          f"{mean('every-8') / mean('base'):.2f} |")
