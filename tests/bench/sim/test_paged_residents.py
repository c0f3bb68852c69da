"""``PagedResidency.residents``' fast path for one full-attention group against the
general per-request reading (``_grouped_residents``), on vLLM's real block pool: every
step of simulated runs with prefix caching on (shared system prompts, chats) and off,
with and without speculative lookahead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm")

from proxima_bench.sim.simulate import make_scheduler, make_workload, simulate  # noqa: E402

MODEL = Path(__file__).resolve().parents[3] / "models" / "tiny-llama"
pytestmark = pytest.mark.skipif(
    not (MODEL / "config.json").exists(), reason="tiny model not built (scripts/tiny_model.py)"
)


@pytest.mark.parametrize(
    ("kind", "caching", "lookahead"),
    [("sysprompt", True, 0), ("chat", True, 0), ("sysprompt", True, 3), ("uniform", False, 2)],
)
def test_plain_residents_equal_the_general_reading(
    kind: str, caching: bool, lookahead: int
) -> None:
    scheduler = make_scheduler(
        str(MODEL), {"admission": "adaptive"}, 16000, max_num_seqs=128, prefix_caching=caching
    )
    view = scheduler.residency_view
    assert view._fulls == 1 and not view._window  # the fast path's case
    view.lookahead_tokens = lookahead  # the reading's arithmetic, not the scheduler's
    checked: list[int] = []
    shared_seen: list[int] = []

    def on_step(_out: Any) -> None:
        running = scheduler.running
        totals = np.array([r.num_tokens for r in running], dtype=np.int64)
        if lookahead:  # as if drafts were rejected: more pages held than tokens need
            totals = np.maximum(totals - 40, 0)
        fast = view._plain_residents(running, totals.copy())
        slow = view._grouped_residents(running, totals.copy())
        assert np.array_equal(fast.own, slow.own)
        assert fast.shared == slow.shared and fast.window is None and slow.window is None
        # Every holder the general reading names sits at the same index.
        assert all(fast.positions[k] == i for k, i in slow.positions.items())
        checked.append(len(running))
        shared_seen.append(fast.shared)

    result = simulate(scheduler, make_workload(kind, 300), "check", on_step=on_step).to_dict()
    assert result["finished"] >= 300 or kind == "chat"
    assert max(checked) > 20  # the pool held many requests at once
    if caching and kind == "sysprompt":
        assert max(shared_seen) > 0  # shared prefixes were read
