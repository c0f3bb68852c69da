"""One burst in the scheduler simulator (proxima_bench.sim): stock or proxima (adaptive admission),
prefix caching on; prints one JSON line (steps, preemptions, mean running, scheduler us per step).

usage: PYTHONPATH=vllm-proxima/src:proxima-bench/src python burst.py stock|proxima MODEL SLOTS REQUESTS
"""

import json
import sys

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate

label, model, slots, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
workload = make_workload("uniform", n)
proxima = None if label == "stock" else {"admission": "adaptive"}
scheduler = make_scheduler(model, proxima, slots, prefix_caching=True)
r = simulate(scheduler, workload, label).to_dict()
keep = ("steps", "preemptions", "running_mean", "per_step_us")
print(json.dumps({"code": label, "model": model, "slots": slots, "requests": n, **{k: r[k] for k in keep}}))
