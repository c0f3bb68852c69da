"""Scheduling outcome with and without the held bound on tight pools with shared system
prompts (the case where the two runs can part): steps, preemptions and mean running
requests per pool size and workload seed. One JSON line per pair on stdout.

    PYTHONPATH=vllm-proxima/src .venv/bin/python docs/benchmarks/cpu-held-bound-2026-12-06/sweep.py
"""

from __future__ import annotations

import json
from typing import Any

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate
from vllm_proxima.scheduling.admission import ProjectedPeakPolicy

MODEL = "models/tiny-llama"


def run(slots: int, seed: int, use: bool) -> tuple[dict[str, Any], list[Any]]:
    original = ProjectedPeakPolicy._fits_held
    if not use:
        ProjectedPeakPolicy._fits_held = lambda *_a, **_k: False  # type: ignore[method-assign]
    try:
        scheduler: Any = make_scheduler(
            MODEL, {"admission": "adaptive"}, slots, max_num_seqs=256, prefix_caching=True
        )
        schedule: list[Any] = []
        result = simulate(
            scheduler,
            make_workload("sysprompt", 300, seed=seed),
            "sweep",
            on_step=lambda out: schedule.append(sorted(out.num_scheduled_tokens.items())),
        ).to_dict()
    finally:
        ProjectedPeakPolicy._fits_held = original  # type: ignore[method-assign]
    return result, schedule


def main() -> None:
    for slots in (5000, 5500, 6000, 6500, 7000, 7500, 8000, 12000):
        for seed in (0, 1):
            (a, sa), (b, sb) = run(slots, seed, True), run(slots, seed, False)
            print(
                json.dumps(
                    {
                        "slots": slots,
                        "seed": seed,
                        "steps": [a["steps"], b["steps"]],
                        "steps_ratio": round(a["steps"] / b["steps"], 4),
                        "preemptions": [a["preemptions"], b["preemptions"]],
                        "running_mean": [a["running_mean"], b["running_mean"]],
                        "finished": [a["finished"], b["finished"]],
                        "identical_schedule": sa == sb,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
