"""The victim hooks of the proxima scheduler, on either release's call pattern.

vLLM 0.26 calls only ``_pop_preemption_victim`` (pick and pop in one). From 0.32 upstream
names the victim first (``_preemption_victim``), checks that its blocks can be freed, then
calls ``_pop_preemption_victim``: the request popped must be the one checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_proxima.scheduling.scheduler import ProximaSchedulerMixin


@dataclass
class Policy:
    """Picks the running request at ``pick`` and records the preemptions it is told of."""

    pick: int
    picked: int = 0
    preempted: list[str] = field(default_factory=list)

    def pick_victim(self, running: list[Any], req_index: int) -> int:
        assert req_index <= self.pick < len(running)
        self.picked += 1
        return self.pick

    def on_preempt(self, request: Any) -> None:
        self.preempted.append(request)


class Stand(ProximaSchedulerMixin):
    def __init__(self, running: list[str], pick: int) -> None:
        self.running = running  # type: ignore[assignment]
        self.admission = Policy(pick)  # type: ignore[assignment]


def test_pop_alone_picks_and_pops() -> None:  # vLLM 0.26
    s = Stand(["a", "b", "c", "d"], pick=1)
    assert s._pop_preemption_victim(0) == "b"
    assert s.running == ["a", "c", "d"]
    assert s.admission.preempted == ["b"]  # type: ignore[attr-defined]


def test_named_victim_is_the_one_popped() -> None:  # vLLM 0.32+
    s = Stand(["a", "b", "c", "d"], pick=2)
    named = s._preemption_victim(1)
    assert named == "c" and s.running == ["a", "b", "c", "d"]  # named, not yet removed
    s.admission.pick = 3  # type: ignore[attr-defined]  # a second pick would differ
    assert s._pop_preemption_victim(1) == "c"
    assert s.running == ["a", "b", "d"]
    assert s.admission.picked == 1  # type: ignore[attr-defined]  # picked once
    assert s.admission.preempted == ["c"]  # type: ignore[attr-defined]
    # The name is used once: the next pop without a name picks again.
    s.admission.pick = 2  # type: ignore[attr-defined]
    assert s._pop_preemption_victim(0) == "d"
    assert s.admission.picked == 2  # type: ignore[attr-defined]


def test_named_victim_found_by_identity() -> None:
    first, twin = ["x"], ["x"]  # equal, not the same object
    s = Stand([twin, first], pick=1)
    assert s._preemption_victim(0) is first
    assert s._pop_preemption_victim(0) is first
    assert s.running == [twin] and s.running[0] is twin
