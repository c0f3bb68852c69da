"""Long outputs (64 requests at once, prompt U[50,200], output U[1000,2000]) in the scheduler
simulator: stock against proxima's admission at several horizons and with other preemption
victims, and how many requests run in each tenth of the run. One JSON line per run.

    PYTHONPATH=vllm-proxima/src:proxima-bench/src \
        python3 docs/benchmarks/cpu-longout-tail-2026-12-07/tail.py SEEDS KV_SLOTS...
"""

from __future__ import annotations

import json
import sys
from typing import Any

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate

VARIANTS: dict[str, dict[str, Any] | None] = {
    "stock": None,
    "proxima": {"admission": "adaptive"},  # the default: horizon 128, cheapest-to-recompute victim
    "proxima-h32": {"admission": "adaptive", "horizon": 32},
    "proxima-h512": {"admission": "adaptive", "horizon": 512},
    "proxima-victim-newest": {"admission": "adaptive"},  # upstream's victim
    "proxima-victim-most": {"admission": "adaptive"},  # the most computed tokens
    "proxima-admission-stock": {"admission": "stock"},  # proxima's victim, stock's admission
}


def newest(running: list[Any], req_index: int) -> int:
    return len(running) - 1


def most_computed(running: list[Any], req_index: int) -> int:
    if len(running) - req_index <= 1:
        return len(running) - 1
    return max(range(req_index, len(running)), key=lambda j: (running[j].num_computed_tokens, -j))


def main() -> None:
    seeds, kvs = int(sys.argv[1]), [int(x) for x in sys.argv[2:]]
    for kv in kvs:
        for seed in range(seeds):
            workload = make_workload("uniform", 64, (1000, 2000), 1.0, seed)
            for name, config in VARIANTS.items():
                scheduler = make_scheduler(
                    "models/tiny-llama", config, kv, max_num_seqs=256, prefix_caching=True
                )
                if name.endswith("victim-newest"):
                    scheduler.admission.pick_victim = newest
                elif name.endswith("victim-most"):
                    scheduler.admission.pick_victim = most_computed
                running: list[int] = []
                result = simulate(
                    scheduler,
                    workload,
                    name,
                    on_step=lambda out, r=running: r.append(len(out.num_scheduled_tokens)),
                )
                n = len(running)
                deciles = [
                    round(
                        sum(running[q * n // 10 : (q + 1) * n // 10])
                        / max(1, (q + 1) * n // 10 - q * n // 10),
                        2,
                    )
                    for q in range(10)
                ]
                row = {
                    "kv_slots": kv,
                    "seed": seed,
                    "variant": name,
                    "steps": result.steps,
                    "preemptions": result.preemptions,
                    "prefill_tokens": result.prefill_tokens,
                    "running_mean": result.running_mean,
                    "running_by_decile": deciles,
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
