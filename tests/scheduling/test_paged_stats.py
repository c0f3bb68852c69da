"""The paged layout's ``proxima:kv_slots_*`` figures: they add up to the pool on every
report, the cached-page recount (a pass over the pool) runs at most once a second while
requests run, and every report while idle is exact."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import make_scheduler  # noqa: E402
from vllm_proxima.scheduling import scheduler as sched_mod  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/setup.sh)"
)


def test_cached_recount_is_throttled_while_running_and_exact_when_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scheduler = make_scheduler(str(MODEL), {"admission": "adaptive"}, 4096, prefix_caching=True)
    view = scheduler.residency_view
    counts = iter(range(1, 1000))
    recounts: list[int] = []

    def evictable() -> int:
        recounts.append(n := next(counts))
        return n

    clock = [100.0]
    monkeypatch.setattr(view, "evictable_pages", evictable)
    monkeypatch.setattr(sched_mod.time, "monotonic", lambda: clock[0])
    total = view.pool.num_gpu_blocks - 1

    def report() -> dict[str, float]:
        stats = scheduler._paged_stats()
        assert stats["slots_used"] + stats["slots_cached"] + stats["slots_free"] == (
            total * view.page_size
        )
        return stats

    scheduler.running = [SimpleNamespace()]  # something runs
    assert report()["slots_cached"] == 1 * view.page_size  # the first report counts
    clock[0] += 0.5
    for _ in range(5):
        assert report()["slots_cached"] == 1 * view.page_size  # not recounted within 1 s
    clock[0] += sched_mod.RECOUNT_EVERY_S
    assert report()["slots_cached"] == 2 * view.page_size
    assert recounts == [1, 2]
    scheduler.running = []  # idle: every report recounts
    report()
    report()
    assert recounts == [1, 2, 3, 4]
