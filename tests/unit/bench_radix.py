"""Timing and hit-rate script for RadixCache, not a test: ``python3 tests/unit/bench_radix.py``.

1. Timings of ``match`` / ``insert`` of a 2,000-token prompt against a cache holding
   ~100k tokens, of ``evict`` and of ``num_evictable_slots``, per policy.
2. Hit rates of LRU vs LFU vs ARC on synthetic traces (a few hot system prompts plus
   a scan of unique prompts) at cache sizes where eviction must happen.

``--quick`` runs smaller traces.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from vllm_proxima.kv.radix import RadixCache
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "vllm-proxima/src"))
    from vllm_proxima.kv.radix import RadixCache
from vllm_proxima.kv.slot_pool import SlotPool

POLICIES = ("lru", "lfu", "arc")
VOCAB = 32_000


def best_us(fn: Callable[[], object], undo: Callable[[], object], reps: int = 200) -> float:
    """Best wall time of ``fn`` in microseconds; ``undo`` runs untimed after each."""
    best = float("inf")
    for _ in range(reps):
        gc.disable()  # as timeit does
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        gc.enable()
        undo()
    return best * 1e6


def filled_cache(policy: str, num_slots: int, shape: str) -> tuple[RadixCache, np.ndarray]:
    """A cache of ~100k idle tokens; returns it and a cached 2,000-token prompt.

    Shapes: ``wide``: 8 system prompts x 12 continuations of 1,000 tokens (104
    nodes). ``comb``: a 2,000-token prompt with a 1,000-token branch every 20 tokens
    (its path crosses 100 nodes). ``leaves``: a 1,980-token system prompt with
    5,000 unique 20-token leaves.
    """
    rng = np.random.default_rng(0)
    pool = SlotPool(num_slots)
    cache = RadixCache(pool, policy)
    rand = lambda n: rng.integers(0, VOCAB, n, dtype=np.int32)  # noqa: E731
    if shape == "wide":
        systems = [rand(1000) for _ in range(8)]
        prompts = [np.concatenate((s, rand(1000))) for s in systems for _ in range(12)]
        hit = prompts[37]
    elif shape == "comb":
        hit = rand(2000)
        prompts = [hit] + [np.concatenate((hit[:k], rand(1000))) for k in range(20, 2000, 20)]
    else:
        system = rand(1980)
        prompts = [np.concatenate((system, rand(20))) for _ in range(5000)]
        hit = prompts[2500]
    for toks in prompts:
        got, n = cache.match(toks)
        pool.incref(got)
        slots = np.concatenate((got, pool.allocate(toks.size - n)))
        cache.insert(toks, slots)
        pool.free(slots)
    return cache, hit


def best_evict(policy: str, n: int, shape: str, reps: int) -> float:
    """Best time of one ``evict(n)`` on a freshly filled idle cache (us)."""
    best = float("inf")
    for _ in range(reps):
        cache, _ = filled_cache(policy, 1 << 18, shape)
        gc.collect()
        gc.disable()
        t0 = time.perf_counter()
        assert cache.evict(n) == n
        best = min(best, time.perf_counter() - t0)
        gc.enable()
    return best * 1e6


def time_policy(policy: str, shape: str) -> list[float]:
    """The timings of one table row (us)."""
    rng = np.random.default_rng(1)
    cache, hit = filled_cache(policy, 1 << 20, shape)
    pool = cache.pool
    half = np.concatenate((hit[:1000], rng.integers(0, VOCAB, 1000, dtype=np.int32)))
    row = [
        best_us(lambda: cache.match(hit), lambda: None),
        best_us(lambda: cache.match(half), lambda: None),
    ]
    hit_slots = cache.match(hit)[0]
    # insert 1,000 cached + 1,000 new tokens, with everything else pinned by callers;
    # undo = the caller drops the new slots and evict(1000) takes the new leaf back
    # out, past every other leaf parked as pinned ("evict 1k*").
    everything = np.flatnonzero(pool.refcount() > 0)
    pool.incref(everything)
    prefix = cache.match(half, touch=False)[0]
    state: dict[str, np.ndarray] = {}
    ev: list[float] = []

    def prep() -> None:
        state["fresh"] = pool.allocate(1000)
        state["slots"] = np.concatenate((prefix, state["fresh"]))

    def undo() -> None:
        pool.free(state["fresh"])
        gc.disable()
        t0 = time.perf_counter()
        assert cache.evict(1000) == 1000
        ev.append(time.perf_counter() - t0)
        gc.enable()
        prep()

    prep()
    row.append(best_us(lambda: cache.insert(half, state["slots"]), undo, reps=100))
    row.append(best_us(lambda: cache.insert(hit, hit_slots), lambda: None))
    pool.free(state["fresh"])
    pool.free(everything)
    row.append(min(ev) * 1e6)
    row.append(best_evict(policy, 2000, shape, reps=10))
    row.append(best_evict(policy, 50_000, shape, reps=3))
    row.append(best_us(lambda: cache.num_evictable_slots, lambda: None, reps=50))
    row.insert(0, cache.num_nodes)
    return row


def timings() -> None:
    print("timings (best of n, us; ~100k cached tokens, 2,000-token prompts, pool of 1M slots)")
    cols = ("nodes", "match hit", "match 1k", "insert new", "insert dup", "evict 1k*",
            "evict 2k", "evict 50k", "n_evictable")  # fmt: skip
    print(f"{'shape':7}{'policy':7}" + "".join(f"{c:>12}" for c in cols))
    for shape in ("wide", "comb", "leaves"):
        for policy in POLICIES:
            row = time_policy(policy, shape)
            print(f"{shape:7}{policy:7}" + "".join(f"{v:12.1f}" for v in row))
    print("(match 1k: 1,000 of 2,000 tokens cached; insert new: 1,000 cached + 1,000 new;")
    print(" insert dup: a fully cached prompt; evict 1k*: one new leaf while every other")
    print(" leaf is pinned (parked); evict 2k / 50k: idle cache, pool of 256k slots)")


# ---------------------------------------------------------------------- hit rates
def trace(
    rng: np.random.Generator,
    n: int,
    hot: list[np.ndarray],
    p_hot: float,
    zipf: float = 1.0,
    scan_len: int = 2000,
    suffix: int = 64,
) -> list[np.ndarray]:
    """Requests: a hot system prompt (Zipf over ``hot``) + a unique suffix with
    probability ``p_hot``, else a unique ``scan_len``-token prompt."""
    w = 1.0 / np.arange(1, len(hot) + 1) ** zipf
    w /= w.sum()
    out = []
    for _ in range(n):
        if rng.random() < p_hot:
            h = hot[rng.choice(len(hot), p=w)]
            out.append(np.concatenate((h, rng.integers(0, VOCAB, suffix, dtype=np.int32))))
        else:
            out.append(rng.integers(0, VOCAB, scan_len, dtype=np.int32))
    return out


def simulate(policy: str, reqs: list[np.ndarray], num_slots: int, running: int = 4) -> float:
    """Serves ``reqs`` in order (``running`` stay in flight); returns the token hit rate."""
    pool = SlotPool(num_slots)
    cache = RadixCache(pool, policy)
    live: deque[np.ndarray] = deque()
    hits = total = 0
    for toks in reqs:
        got, k = cache.match(toks)
        pool.incref(got)
        need = toks.size - k
        while True:
            if pool.num_free < need:
                cache.evict(need - pool.num_free)
            fresh = pool.allocate(need)
            if fresh is not None or not live:
                break
            pool.free(live.popleft())  # wait for a running request to finish
        assert fresh is not None, "cache too small for one request"
        slots = np.concatenate((got, fresh))
        cache.insert(toks, slots)
        live.append(slots)
        if len(live) > running:
            pool.free(live.popleft())
        hits += k
        total += toks.size
    return hits / total


def hit_rates(quick: bool) -> None:
    rng = np.random.default_rng(7)
    n = 600 if quick else 3000
    hot_a = [rng.integers(0, VOCAB, 2000, dtype=np.int32) for _ in range(6)]
    hot_b = [rng.integers(0, VOCAB, 2000, dtype=np.int32) for _ in range(6)]
    periodic: list[np.ndarray] = []
    for _ in range(n // 75):
        periodic += trace(rng, 60, hot_a, 1.0) + trace(rng, 15, hot_a, 0.0)
    traces = {
        "hot+scan, 30% hot": trace(rng, n, hot_a, 0.3),
        "hot+scan, 60% hot": trace(rng, n, hot_a, 0.6),
        "60 hot, 15 scan, repeat": periodic,
        "shift: hot set A, then B": (
            trace(rng, n // 2, hot_a, 0.4) + trace(rng, n // 2, hot_b, 0.4)
        ),
    }
    print("\ntoken hit rates: 6 hot 2,000-token system prompts (Zipf 1) + 64-token unique")
    print("suffixes; scan = unique 2,000-token prompts; 4 requests in flight;")
    print("max = hit rate with a cache that never evicts")
    for slots in (16_000, 24_000, 40_000):
        print(f"-- cache (pool) {slots:,} slots")
        for name, reqs in traces.items():
            rates = {p: simulate(p, reqs, slots) for p in POLICIES}
            rates["max"] = simulate("lru", reqs, sum(r.size for r in reqs) + 1)
            cells = "  ".join(f"{p} {r:6.1%}" for p, r in rates.items())
            print(f"   {name:26} {cells}")


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    timings()
    hit_rates(quick)
