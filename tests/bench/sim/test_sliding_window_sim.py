"""Projected-peak admission for sliding-window KV caches, on vLLM's real scheduler and
hybrid KV cache manager with the simulator's fake model.

The tiny Llama made Gemma-2/3-like (alternating sliding and full layers: a sliding and a
full KV cache group) and Mistral-like (all sliding: one sliding group) by its config, a
window of 64 tokens, prompts longer than the window. Proxima must finish everything
within the pool, preempt no more than stock (never at horizon 0, where the projection is
a bound), and hold more requests than the same admission treating every layer as full
attention: that is what the windows buy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import Workload, make_scheduler, simulate  # noqa: E402

MODEL = Path(__file__).resolve().parents[3] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/tiny_model.py)"
)
WINDOW = 64
SW, FULL = "sliding_attention", "full_attention"
LAYOUTS = {
    "alternating": [SW, FULL],
    "all-sliding": [SW, SW],
    # Gemma-3's 5:1: vLLM groups 10 sliding and 2 full layers as 5 sliding groups and a full one.
    "gemma3-like": ([SW] * 5 + [FULL]) * 2,
    # Two full groups and a sliding one (4 full layers, 2 sliding: groups of 2).
    "two-full": [FULL, FULL, SW, FULL, FULL, SW],
}
SLOTS = 4096
REQUESTS = 300


def sliding_model(dest: Path, layer_types: list[str]) -> Path:
    shutil.copytree(MODEL, dest)
    config = json.loads((dest / "config.json").read_text())
    config.update(
        sliding_window=WINDOW, layer_types=layer_types, num_hidden_layers=len(layer_types)
    )
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return dest


def workload(seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    prompts = [
        rng.integers(3, 1000, size=int(rng.integers(50, 300))).tolist() for _ in range(REQUESTS)
    ]
    outputs = [int(rng.integers(16, 400)) for _ in range(REQUESTS)]
    return Workload.from_prompts(prompts, outputs)


def as_full_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """Project every group as full attention (what proxima would do without windows)."""
    from vllm_proxima.scheduling import scheduler as sched

    real = sched.kv_cache_shape

    def shape(manager: Any, **steps: int) -> Any:
        s = real(manager, **steps)
        return s._replace(full=s.full + len(s.windows), windows=())

    monkeypatch.setattr(sched, "kv_cache_shape", shape)


def run(model: Path, proxima: dict | None, check: bool = False) -> dict:
    scheduler = make_scheduler(str(model), proxima, SLOTS, max_num_seqs=256)
    on_step = None
    if check:
        view = scheduler.residency_view
        assert view is not None and view.shape.windows
        mismatches: list[tuple[int, int]] = []

        def on_step(out: Any) -> None:
            # Every held page is some resident's (no prefix caching: nothing shared).
            running = scheduler.running
            totals = np.array([r.num_tokens for r in running], dtype=np.int64)
            res = view.residents(running, totals)
            if res.shared:
                mismatches.append((res.shared, view.held_pages()))

    result = simulate(scheduler, workload(), "sim", on_step=on_step).to_dict()
    if check:
        assert not mismatches, mismatches[:5]
    return result


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    model = sliding_model(tmp_path_factory.mktemp("sw") / request.param, LAYOUTS[request.param])
    out = {
        "layout": request.param,
        "stock": run(model, None),
        "bound": run(model, {"admission": "conservative", "horizon": 0}, check=True),
        "conservative": run(model, {"admission": "conservative"}),
        "adaptive": run(model, {"admission": "adaptive"}),
    }
    with pytest.MonkeyPatch.context() as mp:
        as_full_attention(mp)
        out["as_full"] = run(model, {"admission": "conservative", "horizon": 0})
    return out


@pytest.mark.parametrize("policy", ["bound", "conservative", "adaptive", "as_full"])
def test_everything_finishes_within_the_pool(runs: dict, policy: str) -> None:
    result = runs[policy]
    assert result["finished"] == REQUESTS
    assert result["peak_slots_used"] <= result["capacity_slots"]


def test_stock_preempts_under_pressure(runs: dict) -> None:
    assert runs["stock"]["preemptions"] > 20


@pytest.mark.parametrize("policy", ["bound", "conservative", "adaptive"])
def test_preempts_no_more_than_stock(runs: dict, policy: str) -> None:
    assert runs[policy]["preemptions"] <= runs["stock"]["preemptions"]


def test_the_bound_never_preempts(runs: dict) -> None:
    # Horizon 0: the projection over the whole future is a bound of the pages held.
    assert runs["bound"]["preemptions"] == 0
    assert runs["as_full"]["preemptions"] == 0


def test_windows_admit_more_than_full_attention(runs: dict) -> None:
    bound, as_full = runs["bound"], runs["as_full"]
    assert bound["running_mean"] > 1.2 * as_full["running_mean"]
    assert bound["running_max"] > as_full["running_max"]
    assert bound["steps"] < as_full["steps"]


@pytest.mark.parametrize("layout", ["alternating", "all-sliding", "two-full"])
def test_prefix_hits(tmp_path: Path, layout: str) -> None:
    """vLLM's prefix caching over these groups: hits only where every group hits; the
    full groups' hit pages shared, the sliding groups' counted in their bound."""
    model = sliding_model(tmp_path / layout, LAYOUTS[layout])
    rng = np.random.default_rng(1)
    prefixes = [rng.integers(3, 1000, size=int(rng.integers(64, 200))).tolist() for _ in range(8)]
    prompts = [
        prefixes[int(rng.integers(0, 8))]
        + rng.integers(3, 1000, size=int(rng.integers(1, 60))).tolist()
        for _ in range(REQUESTS)
    ]
    outputs = [int(rng.integers(16, 300)) for _ in range(REQUESTS)]
    results = {}
    for name, proxima in [("stock", None), ("bound", {"admission": "conservative", "horizon": 0})]:
        scheduler = make_scheduler(
            str(model), proxima, SLOTS, max_num_seqs=256, prefix_caching=True
        )
        results[name] = simulate(scheduler, Workload.from_prompts(prompts, outputs), name).to_dict()
    bound = results["bound"]
    assert bound["finished"] == REQUESTS
    assert bound["peak_slots_used"] <= bound["capacity_slots"]
    assert bound["cached_tokens"] > 0
    assert bound["preemptions"] <= results["stock"]["preemptions"]
    assert bound["preemptions"] == 0


@pytest.mark.parametrize(
    ("layout", "full", "windows"),
    [("alternating", 1, 1), ("all-sliding", 0, 1), ("gemma3-like", 1, 5), ("two-full", 2, 1)],
)
def test_the_shape_is_vllms_groups(tmp_path: Path, layout: str, full: int, windows: int) -> None:
    model = sliding_model(tmp_path / layout, LAYOUTS[layout])
    scheduler = make_scheduler(str(model), {"admission": "conservative"}, SLOTS)
    shape = scheduler.residency_view.shape
    assert (shape.full, shape.windows) == (full, (WINDOW,) * windows)
    assert len(scheduler.kv_cache_config.kv_cache_groups) == full + windows
