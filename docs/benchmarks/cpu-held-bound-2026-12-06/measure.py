"""Admission CPU per step with and without the held bound (admission's second fast path),
in the scheduler simulator: vLLM's real scheduler and block pool, a fake model.

"without" patches ``ProjectedPeakPolicy._fits_held`` to return False: the admission as it
was before the bound. Rounds interleave the two. One JSON line per run on stdout.

    PYTHONPATH=vllm-proxima/src .venv/bin/python \
        docs/benchmarks/cpu-held-bound-2026-12-06/measure.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from proxima_bench.sim.simulate import Workload, make_scheduler, make_workload, simulate
from vllm_proxima.scheduling.admission import ProjectedPeakPolicy

# name: (workload, KV slots, max_num_seqs, prefix caching)
CASES: dict[str, tuple[Callable[[], Workload], int, int, bool]] = {
    "sysprompt-c64": (lambda: make_workload("sysprompt", 400), 32768, 64, True),
    "sysprompt-c256-tight": (lambda: make_workload("sysprompt", 400), 8000, 256, True),
    "chat-c256": (lambda: make_workload("chat", 300), 16384, 256, True),
    "burst-1000": (lambda: Workload.uniform(1000), 16384, 1024, True),
    "burst-1000-no-caching": (lambda: Workload.uniform(1000), 16384, 1024, False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="models/tiny-llama")
    args = parser.parse_args()
    original = ProjectedPeakPolicy._fits_held
    for name, (make, slots, seqs, caching) in CASES.items():
        workload = make()
        for rnd in range(args.rounds):
            order = (True, False) if rnd % 2 == 0 else (False, True)
            for use in order:
                ProjectedPeakPolicy._fits_held = (  # type: ignore[method-assign]
                    original if use else (lambda *_a, **_k: False)
                )
                scheduler: Any = make_scheduler(
                    args.model,
                    {"admission": "adaptive"},
                    slots,
                    max_num_seqs=seqs,
                    prefix_caching=caching,
                )
                result = simulate(scheduler, workload, name).to_dict()
                steps = max(1, scheduler._steps)
                print(
                    json.dumps(
                        {
                            "case": name,
                            "round": rnd,
                            "held_bound": use,
                            "admission_us_per_step": round(scheduler._admission_s / steps * 1e6, 2),
                            "scheduler_us_per_step": result["per_step_us"],
                            "steps": result["steps"],
                            "preemptions": result["preemptions"],
                            "running_mean": result["running_mean"],
                            "finished": result["finished"],
                            "bound_passes": scheduler.admission._held.passes,
                        }
                    ),
                    flush=True,
                )
    ProjectedPeakPolicy._fits_held = original  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
