"""Room for a passed-over request (``RESERVE_AFTER``) in the scheduler simulator: per-class
waits in a mixed stream and whole schedules elsewhere, stock against proxima with and
without the reservation. One JSON line per run on stdout; steps, not seconds.

    PYTHONPATH=vllm-proxima/src:proxima-bench/src .venv/bin/python \\
        docs/benchmarks/cpu-reserve-2026-12-06/study.py > runs.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

import vllm_proxima.scheduling.admission as admission
from proxima_bench.sim.simulate import (
    StepTimes,
    Workload,
    make_scheduler,
    make_workload,
    simulate,
)

DEFAULT = admission.RESERVE_AFTER
# name: (workload, KV slots, max_num_seqs)
OTHERS: dict[str, tuple[Callable[[], Workload], int, int]] = {
    "burst-1000": (lambda: Workload.uniform(1000), 16384, 1024),
    "burst-1000-8k": (lambda: Workload.uniform(1000), 8192, 1024),
    "sysprompt-c256-tight": (lambda: make_workload("sysprompt", 400), 8000, 256),
    "chat-c256": (lambda: make_workload("chat", 300), 16384, 256),
}
MODES: dict[str, tuple[dict[str, Any] | None, int]] = {
    "stock": (None, DEFAULT),
    "proxima-no-reserve": ({"admission": "adaptive"}, 10**9),
    "proxima": ({"admission": "adaptive"}, DEFAULT),
}


def _pct(values: list[int], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def run(name: str, workload: Workload, slots: int, seqs: int, mode: str, model: str) -> dict:
    proxima, reserve_after = MODES[mode]
    admission.RESERVE_AFTER = reserve_after
    scheduler = make_scheduler(model, proxima, slots, max_num_seqs=seqs, prefix_caching=True)
    times = StepTimes(scheduler)
    result = simulate(scheduler, workload, name, on_step=times)
    out: dict[str, Any] = {
        "case": name,
        "mode": mode,
        "reserve_after": None if reserve_after >= 10**9 else reserve_after,
        "kv_slots": slots,
        "max_num_seqs": seqs,
        "steps": result.steps,
        "preemptions": result.preemptions,
        "running_mean": result.running_mean,
        "finished": result.finished,
    }
    for cls in sorted(set(workload.classes)):
        first, e2e = times.waits(workload, cls)
        out[cls] = {
            "n": workload.classes.count(cls),
            "first_p50": _pct(first, 50),
            "first_p95": _pct(first, 95),
            "e2e_p50": _pct(e2e, 50),
            "e2e_p95": _pct(e2e, 95),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/tiny-llama")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rates", default="0.45,0.35")
    args = parser.parse_args()
    for seed in map(int, args.seeds.split(",")):
        for rate in map(float, args.rates.split(",")):
            workload = Workload.mixed(300, rate=rate, seed=seed)
            for mode in MODES:
                row = run(f"mixed-r{rate}-s{seed}", workload, 16384, 256, mode, args.model)
                print(json.dumps({"rate": rate, "seed": seed, **row}), flush=True)
    for name, (make, slots, seqs) in OTHERS.items():
        workload = make()
        for mode in MODES:
            print(json.dumps(run(name, workload, slots, seqs, mode, args.model)), flush=True)
    admission.RESERVE_AFTER = DEFAULT


if __name__ == "__main__":
    main()
