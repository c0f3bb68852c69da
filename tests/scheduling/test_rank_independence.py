"""The proxima scheduler's output does not depend on the parallel layout.

Under tensor and pipeline parallelism one scheduler (in the engine core) decides for
every worker; its output, slot ids included, is broadcast by vLLM's executor, and every
rank holds the same number of 1-token pages (its own heads / layers of each). So the
decisions, the slot ids above all, must be the same whatever the TP/PP sizes and the
rank fields of the engine's config are; a data-parallel rank runs its own scheduler
and pool, which must behave as a single-GPU engine's does on the same requests.
The engine-level check (greedy tokens with TP=2 and PP=2 identical to ``--proxima
off``) is tests/engine/test_parallel.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import Workload, make_scheduler, simulate  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (proxima_tools.tiny_model)"
)

LAYOUTS: dict[str, dict[str, Any]] = {
    "tp2-rank0": {"tensor_parallel_size": 2, "rank": 0},
    "tp2-rank1": {"tensor_parallel_size": 2, "rank": 1},
    "pp2-rank1": {"pipeline_parallel_size": 2, "rank": 1},
    "tp2pp2-rank3": {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "rank": 3},
    "dp2-rank1": {"data_parallel_size": 2, "data_parallel_rank": 1},
}


def trace(parallel: dict[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
    """Every step's decisions: tokens per request, page ids handed out, finished ids."""
    steps: list[Any] = []

    def record(out: Any) -> None:
        steps.append(
            (
                sorted(out.num_scheduled_tokens.items()),
                sorted((r.req_id, r.block_ids) for r in out.scheduled_new_reqs),
                sorted(
                    zip(
                        out.scheduled_cached_reqs.req_ids,
                        out.scheduled_cached_reqs.new_block_ids,
                        strict=True,
                    ),
                    key=lambda item: item[0],
                ),
                sorted(out.finished_req_ids),
            )
        )

    # 1,024 slots for 80 requests: admission defers and slots are reused, so the
    # trace covers allocation, deferral, finishing and reuse.
    scheduler = make_scheduler(
        str(MODEL), {"admission": "adaptive"}, 1024, max_num_seqs=64, parallel=parallel
    )
    result = simulate(scheduler, Workload.uniform(80, seed=11), "trace", on_step=record)
    return steps, result.to_dict()


@pytest.fixture(scope="module")
def single() -> tuple[list[Any], dict[str, Any]]:
    return trace(None)


def test_single_gpu_trace_is_substantial(single: tuple[list[Any], dict[str, Any]]) -> None:
    steps, result = single
    assert result["finished"] == 80
    assert result["peak_slots_used"] > 900  # the pool was nearly full at its peak
    handed_out = {
        slot for step in steps for _, groups in step[1] for group in groups for slot in group
    }
    # The paged layout (the default) hands out vLLM's 16-token pages: 63 usable here.
    assert len(handed_out) > 0.9 * result["capacity_slots"] / 16


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_scheduler_output_is_rank_independent(
    single: tuple[list[Any], dict[str, Any]], layout: str
) -> None:
    steps, result = trace(LAYOUTS[layout])
    assert result == {
        **single[1],
        "scheduler_s": result["scheduler_s"],
        "per_step_us": result["per_step_us"],
    }
    assert len(steps) == len(single[0])
    for i, (mine, theirs) in enumerate(zip(steps, single[0], strict=True)):
        assert mine == theirs, f"step {i} differs under {layout}"
