"""Timing script for SlotPool, not a test: ``python3 tests/unit/bench_slot_pool.py``.

Times the hot operations on a 1,000,000-slot pool, then simulates a serving workload
(~1,000 running requests, churn) to report how contiguous requests' slots end up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from vllm_proxima.kv.slot_pool import SlotPool
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima/src"))
    from vllm_proxima.kv.slot_pool import SlotPool

N = 1_000_000


def best_us(fn: Callable[[], object], undo: Callable[[], object], reps: int = 300) -> float:
    """Best wall time of ``fn`` in microseconds; ``undo`` runs untimed after each."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        undo()
    return best * 1e6


def best_free_us(pool: SlotPool, take: Callable[[], np.ndarray], reps: int = 300) -> float:
    """Best wall time of ``pool.free`` on the slots ``take`` allocates (untimed)."""
    best = float("inf")
    for _ in range(reps):
        slots = take()
        t0 = time.perf_counter()
        pool.free(slots)
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def busy_pool(stride: int = 16) -> tuple[SlotPool, np.ndarray]:
    """1,000 requests x (500 prompt slots + 20 decode steps): about half full."""
    pool = SlotPool(N, stride=stride)
    last = np.array([pool.allocate(500)[-1] for _ in range(1000)], dtype=np.int64)
    for _ in range(20):
        last = np.array([pool.allocate(1, int(a))[0] for a in last], dtype=np.int64)
    return pool, last


def timings() -> None:
    t0 = time.perf_counter()
    SlotPool(N)
    print(f"construct 1M pool (first)        {1e3 * (time.perf_counter() - t0):7.2f} ms")
    best = best_us(lambda: SlotPool(N), lambda: None, 20) / 1e3
    print(f"construct 1M pool (best)         {best:7.2f} ms")

    pool, last = busy_pool()
    held: list[np.ndarray] = []

    def keep(
        fn: Callable[[], np.ndarray | tuple[np.ndarray, np.ndarray] | None],
    ) -> Callable[[], None]:
        def run() -> None:
            out = fn()
            held.append(out[0] if isinstance(out, tuple) else out)

        return run

    def undo() -> None:
        pool.free(held.pop())

    print(f"pool usage {pool.usage:.2f}")
    rows: list[tuple[str, Callable[[], None]]] = [
        ("allocate(150) fresh", keep(lambda: pool.allocate(150))),
        ("allocate(150, after) extend", keep(lambda: pool.allocate(150, N // 2))),
        (
            "allocate(150, after) move",
            keep(lambda: pool.allocate(150, int(last[0]) - 1)),
        ),
        ("allocate(1, after) move", keep(lambda: pool.allocate(1, int(last[0]) - 1))),
        ("allocate(4000) fresh", keep(lambda: pool.allocate(4000))),
    ]
    for name, fn in rows:
        print(f"{name:32s} {best_us(fn, undo):7.1f} us")

    frees: list[tuple[str, Callable[[], np.ndarray]]] = [
        ("contiguous", lambda: pool.allocate(200)),
        ("random order", lambda: np.random.permutation(pool.allocate(200))),
    ]
    for name, take in frees:
        print(f"free 200 slots, {name:16s} {best_free_us(pool, take):7.1f} us")


def simulate(stride: int, steps: int = 1000, lanes: int = 1000, out_max: int = 600) -> None:
    """``lanes`` running requests with churn; decode one ``allocate(1, after)`` per request
    (as the KV manager's decode path).

    Each lane holds one request (prompt 50..1500 slots, 10..out_max decode steps);
    a finished request is freed and replaced at once while 5% of the pool is free.
    Reports slots per contiguous run over all finished requests (prompt included).
    """
    rng = np.random.default_rng(0)
    pool = SlotPool(N, stride=stride)
    log = np.zeros((lanes, 1500 + out_max), np.int32)  # each lane's slots, in order
    length = np.zeros(lanes, np.int64)
    left = np.zeros(lanes, np.int64)  # decode steps left; 0 = lane empty
    tokens = runs = 0
    t = dict.fromkeys(("admit", "decode", "free"), 0.0)
    n_admit = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        for i in np.flatnonzero(left == 0):
            if pool.num_free < N // 20:
                break
            slots = pool.allocate(int(rng.integers(50, 1500)))
            log[i, : slots.size], length[i], left[i] = (
                slots,
                slots.size,
                rng.integers(10, out_max),
            )
            n_admit += 1
        t1 = time.perf_counter()
        act = np.flatnonzero(left > 0)
        last = log[act, length[act] - 1].astype(np.int64)
        new = np.array([pool.allocate(1, a)[0] for a in last.tolist()], np.int32)
        t2 = time.perf_counter()
        log[act, length[act]] = new
        length[act] += 1
        left[act] -= 1
        for i in np.flatnonzero((left == 0) & (length > 0)):
            slots = log[i, : length[i]]
            tokens, runs = tokens + slots.size, runs + SlotPool.runs(slots)
            t3 = time.perf_counter()
            pool.free(slots)
            t["free"] += time.perf_counter() - t3
            length[i] = 0
        t["admit"], t["decode"] = t["admit"] + t1 - t0, t["decode"] + t2 - t1
    mode = "allocate x N"
    print(
        f"out<={out_max:3d} stride={stride:3d} {mode}: slots/run "
        f"{tokens / runs:6.1f}; decode step {1e6 * t['decode'] / steps:6.0f} us; "
        f"allocate(prompt) {1e6 * t['admit'] / max(n_admit, 1):5.1f} us; free(request) "
        f"{1e6 * t['free'] / max(n_admit - lanes, 1):5.1f} us; usage {pool.usage:.2f}"
    )


def main() -> None:
    timings()
    print("\nsimulation: 1M slots, 1000 lanes, prompts 50..1500, outputs 10..out:")
    for out_max in (600, 60):
        for stride in (64, 1):
            simulate(stride, steps=600, out_max=out_max)


if __name__ == "__main__":
    main()
