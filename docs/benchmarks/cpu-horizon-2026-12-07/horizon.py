"""Proxima's admission horizon (32, 64, 128 = the default) against stock in the scheduler
simulator, over the matrix's shapes of work: the 1,000-request burst, 64 long outputs, 4-turn
chats at 64 in flight (prefix caching on everywhere), on the MHA 7B and GQA-8 8B pool sizes.
One JSON line per run.

    PYTHONPATH=vllm-proxima/src:proxima-bench/src \\
        python3 docs/benchmarks/cpu-horizon-2026-12-07/horizon.py SEEDS
"""

from __future__ import annotations

import json
import sys
from typing import Any

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate

HORIZONS = (None, 32, 64, 128)  # None: stock
POOLS = (16384, 32768)
WORKLOADS: dict[str, tuple[str, int, tuple[int, int], int]] = {
    # name: (kind, requests, output range, max_num_seqs)
    "burst": ("uniform", 1000, (32, 256), 1024),
    "longout": ("uniform", 64, (1000, 2000), 256),
    "chat-c64": ("chat", 320, (32, 256), 64),
}


def main() -> None:
    seeds = int(sys.argv[1])
    for name, (kind, n, output, seqs) in WORKLOADS.items():
        for kv in POOLS:
            for seed in range(seeds):
                workload = make_workload(kind, n, output, 1.0, seed)
                for horizon in HORIZONS:
                    config: dict[str, Any] | None = (
                        None if horizon is None else {"admission": "adaptive", "horizon": horizon}
                    )
                    scheduler = make_scheduler(
                        "models/tiny-llama", config, kv, max_num_seqs=seqs, prefix_caching=True
                    )
                    result = simulate(scheduler, workload, str(horizon))
                    row = {
                        "workload": name,
                        "kv_slots": kv,
                        "seed": seed,
                        "horizon": horizon,
                        "steps": result.steps,
                        "preemptions": result.preemptions,
                        "prefill_tokens": result.prefill_tokens,
                        "running_mean": result.running_mean,
                    }
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
