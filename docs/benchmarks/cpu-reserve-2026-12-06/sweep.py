"""``RESERVE_AFTER`` swept: steps on two tight shared-prompt pools and steps and the long
class's P95 first-token wait in three mixed streams. One JSON line per setting.

    PYTHONPATH=vllm-proxima/src:proxima-bench/src .venv/bin/python \\
        docs/benchmarks/cpu-reserve-2026-12-06/sweep.py > sweep.jsonl
"""

from __future__ import annotations

import json

import numpy as np

import vllm_proxima.scheduling.admission as admission
from proxima_bench.sim.simulate import StepTimes, Workload, make_scheduler, make_workload, simulate

MODEL = "models/tiny-llama"
DEFAULT = admission.RESERVE_AFTER
POOLS = {  # name: (workload, KV slots, admission); max_num_seqs 256
    "sysprompt-tight": (lambda: make_workload("sysprompt", 300), 6000, "adaptive"),
    "sysprompt-tighter": (lambda: make_workload("sysprompt", 300, seed=1), 5500, "conservative"),
}
STREAMS = ((0, 0.45), (2, 0.45), (0, 0.35))  # (seed, rate) of Workload.mixed(300)


def main() -> None:
    for after in (None, 8, 16, 32, 48):
        admission.RESERVE_AFTER = 10**9 if after is None else after
        row: dict = {"reserve_after": after}
        for name, (make, slots, policy) in POOLS.items():
            s = make_scheduler(MODEL, {"admission": policy}, slots, 256, prefix_caching=True)
            row[name] = {"steps": simulate(s, make(), name).steps}
        for seed, rate in STREAMS:
            wl = Workload.mixed(300, rate=rate, seed=seed)
            s = make_scheduler(MODEL, {"admission": "adaptive"}, 16384, 256, prefix_caching=True)
            times = StepTimes(s)
            steps = simulate(s, wl, "mixed", on_step=times).steps
            p95 = float(np.percentile(times.waits(wl, "long")[0], 95))
            row[f"mixed-r{rate}-s{seed}"] = {"steps": steps, "long_first_p95": round(p95, 1)}
        print(json.dumps(row), flush=True)
    admission.RESERVE_AFTER = DEFAULT


if __name__ == "__main__":
    main()
