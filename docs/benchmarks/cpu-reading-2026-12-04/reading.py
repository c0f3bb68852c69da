"""Admission CPU per step and scheduling outcome in the scheduler simulator, for one
workload, one policy and a reading kept ``READ_EVERY`` steps (``base``: the code of
BEFORE_SRC, before readings were kept).

usage: PYTHONPATH=SRC:proxima-bench/src python reading.py LABEL READ_EVERY MODEL SLOTS \
           REQUESTS KIND CACHING POLICY [OUT_MIN OUT_MAX [MAX_TOKENS_FACTOR]]
(READ_EVERY ``-``: the code's default; one JSON line on stdout)."""

import json
import sys
import time

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate

label, read_every, model, slots, n, kind, caching, policy = sys.argv[1:9]
output = (int(sys.argv[9]), int(sys.argv[10])) if len(sys.argv) > 10 else (32, 256)
factor = float(sys.argv[11]) if len(sys.argv) > 11 else 1.0  # max_tokens / output
if read_every != "-":
    import vllm_proxima.scheduling.admission as admission

    init = admission.ProjectedPeakPolicy.__init__

    def with_read_every(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **{**kwargs, "read_every": int(read_every)})

    admission.ProjectedPeakPolicy.__init__ = with_read_every
workload = make_workload(kind, int(n), output=output, max_tokens_factor=factor)
scheduler = make_scheduler(model, {"admission": policy}, int(slots), prefix_caching=caching == "on")
t0 = time.perf_counter()
result = simulate(scheduler, workload, label).to_dict()
steps = result["steps"]
print(json.dumps({
    "code": label, "read_every": read_every, "model": model, "slots": int(slots),
    "requests": int(n), "workload": kind, "output": list(output), "max_tokens_factor": factor, "prefix_caching": caching,
    "policy": policy, "steps": steps, "preemptions": result["preemptions"],
    "running_mean": result["running_mean"], "finished": result["finished"],
    "admission_us_per_step": round(1e6 * scheduler._admission_s / steps, 1),
    "schedule_us_per_step": round(1e6 * scheduler._schedule_s / steps, 1),
    "wall_s": round(time.perf_counter() - t0, 2),
}), flush=True)
