"""Admission CPU per step in the simulator's burst (1,000 requests at once, a 32,768-token pool,
prefix caching on, adaptive admission): scheduler._admission_s and _schedule_s over its steps.
usage: PYTHONPATH=SRC python admission.py MODEL LABEL ROUNDS  (one JSON line per round)."""

import json
import sys

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate

model, label, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
workload = make_workload("uniform", 1000)
for _ in range(rounds):
    scheduler = make_scheduler(model, {"admission": "adaptive"}, 32768, prefix_caching=True)
    result = simulate(scheduler, workload, label).to_dict()
    steps = result["steps"]
    print(json.dumps({
        "code": label, "model": model, "steps": steps, "preemptions": result["preemptions"],
        "running_mean": result["running_mean"],
        "admission_us_per_step": round(1e6 * scheduler._admission_s / steps, 1),
        "schedule_us_per_step": round(1e6 * scheduler._schedule_s / steps, 1),
    }), flush=True)
