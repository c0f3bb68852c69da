"""Where requests held back by the admission count in vLLM's waiting-by-reason figures.

``vllm:num_requests_waiting_by_reason`` splits waiting requests into ``capacity``
(``SchedulerStats.num_waiting_reqs``) and ``deferred`` (``num_skipped_waiting_reqs``). On vLLM
0.26 a held-back request sits in the scheduler's skipped-waiting queue, so it counts as
deferred. From 0.32 the queue and the reason are separate, and the scheduler patch counts it
under capacity, as a request whose allocation failed (docs/observability.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import block_hasher, make_scheduler  # noqa: E402

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/setup.sh)"
)

REQUESTS = 20


def scheduler_with(requests: int, max_tokens: int = 200) -> Any:
    """A conservative-admission scheduler over 1,024 slots with ``requests`` 100-token
    prompts queued: each may grow to 100 + ``max_tokens`` tokens, so only a few fit at once."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    scheduler = make_scheduler(str(MODEL), {"admission": "conservative"}, 1024, max_num_seqs=64)
    hasher = block_hasher(scheduler)
    for i in range(requests):
        scheduler.add_request(
            Request(
                request_id=str(i),
                prompt_token_ids=[3 + (i * 7 + j) % 900 for j in range(100)],
                sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                pooling_params=None,
                block_hasher=hasher,
            )
        )
    return scheduler


def test_held_back_requests_are_counted_by_reason() -> None:
    scheduler = scheduler_with(REQUESTS)
    scheduler.schedule()
    stats = scheduler.make_stats()
    assert stats is not None
    running = stats.num_running_reqs
    waiting = stats.num_waiting_reqs + stats.num_skipped_waiting_reqs
    assert 0 < running < REQUESTS and running + waiting == REQUESTS
    assert scheduler.admission.stats()["admissions_deferred"] > 0  # the admission held some back
    if hasattr(scheduler, "deferred_waiting"):  # vLLM 0.32+: waiting for capacity
        assert stats.num_skipped_waiting_reqs == 0
        assert stats.num_waiting_reqs == REQUESTS - running
    else:  # vLLM 0.26: in the skipped-waiting queue
        assert stats.num_skipped_waiting_reqs > 0


def test_held_back_requests_mark_the_step_capacity_bound() -> None:
    """DP prefill balancing skips throttling while the last admitting step left requests
    waiting for capacity (``prefill_capacity_bound``). Requests the admission holds back are
    waiting for capacity, on either release's queue: with fewer held back than the admission
    passes over in one step (it skips them, and stops only at the fifth), vLLM 0.26's
    ``waiting`` is empty after the step and upstream alone would read it as drained."""
    scheduler = scheduler_with(5)
    scheduler.prefill_capacity_bound = False
    scheduler.schedule()
    held = 5 - len(scheduler.running)
    assert 0 < held < 4 and scheduler.admission.stats()["admissions_deferred"] == held
    assert scheduler.prefill_capacity_bound is True

    # A step that holds nothing back and drains the queue records the opposite.
    drained = scheduler_with(1, max_tokens=20)
    drained.prefill_capacity_bound = True
    drained.schedule()
    assert drained.admission.stats()["admissions_deferred"] == 0
    assert drained.prefill_capacity_bound is False


def test_a_throttled_step_leaves_the_flag_to_upstream() -> None:
    """On a step where upstream defers prefills (throttled, not capacity-bound, decodes
    running) it records nothing, and neither does proxima; the engine core passes
    ``throttle_prefills`` positionally, as here."""
    scheduler = scheduler_with(5)
    scheduler.schedule()  # admits a few, holds the rest back
    assert scheduler.running and all(not r.is_prefill_chunk for r in scheduler.running)
    scheduler.prefill_capacity_bound = False
    scheduler.schedule(True)  # throttle_prefills, passed as upstream's engine core passes it
    assert scheduler.prefill_capacity_bound is False
    scheduler.schedule(throttle_prefills=False)  # a release step: capacity-bound again
    assert scheduler.prefill_capacity_bound is True
