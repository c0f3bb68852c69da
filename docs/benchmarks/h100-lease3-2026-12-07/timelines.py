"""Per-request timelines of the long-output runs, from `vllm bench serve`'s detailed result files
(`--save-detailed`: start times, TTFTs and inter-token latencies), condensed to when each request
finished and where its stream stalled (an inter-token gap over 0.2 s: a preemption's wait).

    PYTHONPATH=proxima-bench/src \
        python3 docs/benchmarks/h100-lease3-2026-12-07/timelines.py OUT.json RESULTS_DIR[=LABEL] ...

RESULTS_DIR is a matrix's `results/` folder (in the plan's `proof-matrix-7b.tgz`, not kept here:
~6 MB). Prints the tail of every long-output run, with the output tok/s up to the run's P90
finish (`proxima_bench.serving.tail`: the rate before the tail).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from proxima_bench.serving.tail import run_tail

STALL_S = 0.2


def condense(path: Path) -> dict[str, Any]:
    with open(path) as f:
        d = json.load(f)
    t0 = min(d["start_times"])
    requests = []
    for i, start in enumerate(d["start_times"]):
        t = start - t0 + d["ttfts"][i]
        stalls = []
        for n, gap in enumerate(d["itls"][i], start=1):
            if gap > STALL_S:
                stalls.append({"at_s": round(t, 2), "tokens": n, "wait_s": round(gap, 2)})
            t += gap
        requests.append(
            {
                "index": i,
                "input": d["input_lens"][i],
                "output": d["output_lens"][i],
                "first_token_s": round(start - t0 + d["ttfts"][i], 3),
                "end_s": round(t, 3),
                "stalls": stalls,
            }
        )
    tail = run_tail(d) or {}
    return {
        "duration_s": d["duration"],
        "output_tok_s": d["output_throughput"],
        "until_p90_tok_s": tail.get("until_p90_tok_s"),
        "p90_end_s": (tail.get("end_s") or {}).get("p90"),
        "requests": requests,
    }


def main() -> None:
    out, runs = Path(sys.argv[1]), {}
    for arg in sys.argv[2:]:
        folder, _, label = arg.partition("=")
        for path in sorted(Path(folder).glob("*longout*.json")):
            name = f"{label}/{path.stem}" if label else path.stem
            runs[name] = condense(path)
    out.write_text(json.dumps(runs, indent=1) + "\n")
    for name, run in runs.items():
        ends = sorted(run["requests"], key=lambda r: r["end_s"])
        last = ends[-1]
        waited = sum(s["wait_s"] for s in last["stalls"])
        print(
            f"{name}: 63rd done {ends[-2]['end_s']:.1f} s, last {last['end_s']:.1f} s "
            f"(request {last['index']}, {last['input']} in / {last['output']} out, "
            f"stalled {waited:.1f} s in {len(last['stalls'])} waits); "
            f"{run['output_tok_s']:.0f} tok/s, {run['until_p90_tok_s']:.0f} until the P90 finish "
            f"({run['p90_end_s']:.1f} s)"
        )


if __name__ == "__main__":
    main()
