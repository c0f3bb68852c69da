"""One candidate's placement: Placement.peak against Curve.peak (built once), and what a
curve costs to build, insert into and remove from, at n residents (16-token pages, one full
group, a 'low' fixed array, start 3, horizon cut at 131). Best of 5 rounds of 2,000 calls.
usage: PYTHONPATH=vllm-proxima/src python3 micro.py"""

import json
import time

import numpy as np

from vllm_proxima.scheduling.curve import Curve
from vllm_proxima.scheduling.projection import Placement


def best(fn, calls=2000, rounds=5):
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return round(min(out), 1)


rng = np.random.default_rng(0)
for n in (100, 200, 400):
    held, rem = rng.integers(50, 500, n), rng.integers(0, 256, n)
    low = rng.integers(0, 9, n)
    pl = Placement.of(held, rem, 16, 1, {"low": low})
    curve = Curve.of(pl, "low", 131, 3)
    assert curve is not None
    c, r, w = 180, 120, 5
    assert curve.peak(c, r, w) == pl.peak(c, r, w, "low", cut=131, start=3)
    after = pl.insert(c, r, {"low": w})
    print(json.dumps({
        "residents": n,
        "placement_peak_us": best(lambda: pl.peak(c, r, w, "low", cut=131, start=3)),
        "curve_peak_us": best(lambda: curve.peak(c, r, w)),
        "curve_build_us": best(lambda: Curve.of(pl, "low", 131, 3)),
        "placement_insert_us": best(lambda: pl.insert(c, r, {"low": w})),
        "curve_insert_us": best(lambda: curve.insert(after, c, r, w)),
    }))
