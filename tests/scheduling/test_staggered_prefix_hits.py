"""Regression: prefix hits on a resident's sole pages while other residents depart.

Requests arrive over time behind one of 40 prefixes, each used by few requests, so a waiting
request often hits pages exactly one resident holds, in a step after others finished. The
admission named that holder by its index in the residents list of an earlier step: the wrong
resident was debited, or the index ran past the end and the engine core died (IndexError in
``decide``; found by the dashboard's CPU demo at 24 concurrent clients). Both layouts, on
vLLM's real scheduler with the simulator's fake model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import Workload, make_scheduler, simulate  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/setup.sh)"
)
REQUESTS = 400


def staggered_prefix_workload(seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(3, 1000, size=int(rng.integers(32, 160))).tolist() for _ in range(40)]
    prompts, outputs, arrivals = [], [], []
    for i in range(REQUESTS):
        suffix = rng.integers(3, 1000, size=int(rng.integers(1, 60))).tolist()
        prompts.append(prefixes[int(rng.integers(0, 40))] + suffix)
        outputs.append(int(rng.integers(4, 120)))
        arrivals.append(int(i * rng.uniform(0.5, 3)))
    workload = Workload.from_prompts(prompts, outputs)
    workload.arrival_steps = arrivals
    return workload


# Seeds that crashed before the fix (each in a fresh process): paged 0 and 4, token 2.
@pytest.mark.parametrize(("layout", "seed"), [("paged", 0), ("paged", 4), ("token", 2)])
def test_hits_on_sole_pages_after_departures(layout: str, seed: int) -> None:
    scheduler = make_scheduler(
        str(MODEL),
        {"admission": "adaptive", "kv_layout": layout},
        2048,
        max_num_seqs=64,
        prefix_caching=True,
    )
    result = simulate(scheduler, staggered_prefix_workload(seed), layout).to_dict()
    assert result["finished"] == REQUESTS
    assert result["peak_slots_used"] <= result["capacity_slots"]
    assert result["cached_tokens"] > 0  # the prefixes were hit
