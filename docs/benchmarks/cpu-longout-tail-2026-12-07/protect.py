"""The long-output point with preempted requests protected from being chosen again after one
preemption instead of two (`vllm_proxima.scheduling.victim.PROTECTED_AFTER_PREEMPTIONS`), against
stock, over SEEDS workloads. One JSON line per workload.

    PYTHONPATH=vllm-proxima/src:proxima-bench/src \\
        python3 docs/benchmarks/cpu-longout-tail-2026-12-07/protect.py SEEDS KV_SLOTS
"""

from __future__ import annotations

import json
import sys

import vllm_proxima.scheduling.victim as victim
from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate


def main() -> None:
    seeds, kv = int(sys.argv[1]), int(sys.argv[2])
    default = victim.PROTECTED_AFTER_PREEMPTIONS
    for seed in range(seeds):
        workload = make_workload("uniform", 64, (1000, 2000), 1.0, seed)
        row: dict[str, object] = {"kv_slots": kv, "seed": seed}
        for name, protect in (("stock", None), ("protect-2", 2), ("protect-1", 1)):
            victim.PROTECTED_AFTER_PREEMPTIONS = protect or default
            config = None if protect is None else {"admission": "adaptive"}
            scheduler = make_scheduler(
                "models/tiny-llama", config, kv, max_num_seqs=256, prefix_caching=True
            )
            result = simulate(scheduler, workload, name)
            row[name] = {"steps": result.steps, "preemptions": result.preemptions}
        victim.PROTECTED_AFTER_PREEMPTIONS = default
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
