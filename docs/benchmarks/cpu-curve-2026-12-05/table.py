"""Table of run.sh's JSON lines: per point and code, the outcome (steps / preemptions / mean
running, equal across rounds) and admission CPU per step (min-max over rounds, and the median's
ratio to 'before').
usage: python3 table.py curve.jsonl"""

import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(line) for line in open(sys.argv[1])]
runs: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
for r in rows:
    runs[(r["model"].split("/")[-1], r["slots"], r["requests"])][r["code"]].append(r)
print("| model | pool | requests | code | steps / preemptions / mean running | admission us/step (min-max) | median / before |")
print("|---|---|---|---|---|---|---|")
for key, codes in runs.items():
    base = statistics.median(r["admission_us_per_step"] for r in codes["before"])
    for code in ("before", "windows", "curve"):
        rs = codes[code]
        outcome = {(r["steps"], r["preemptions"], r["running_mean"]) for r in rs}
        us = [r["admission_us_per_step"] for r in rs]
        o = " or ".join(f"{s} / {p} / {m}" for s, p, m in sorted(outcome))
        print(f"| {key[0]} | {key[1]:,} | {key[2]:,} | {code} | {o} | {min(us):.0f}-{max(us):.0f} | {statistics.median(us) / base:.2f} |")
