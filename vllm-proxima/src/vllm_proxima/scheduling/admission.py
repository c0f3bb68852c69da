"""Admission and preemption-victim policies (placeholder: upstream's behaviour).

The full projected-peak policies come with the admission issue; this module
already owns the interface the scheduler calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.config import ProximaConfig
    from vllm_proxima.kv.manager import ProximaKVCacheManager

Decision = Literal["admit", "skip", "stop"]


class AdmissionPolicy:
    """Upstream's policy: admit while slots are free; preempt the newest."""

    name = "stock"

    def __init__(self, manager: ProximaKVCacheManager) -> None:
        self.manager = manager
        self.num_preemptions = 0

    def decide(
        self,
        request: Request,
        num_new_tokens: int,
        num_computed_tokens: int,
        running: list[Request],
    ) -> Decision:
        return "admit"

    def pick_victim(self, running: list[Request], req_index: int) -> int:
        """Index in ``running`` (at or after ``req_index``) of the request to preempt."""
        return len(running) - 1

    def on_preempt(self, request: Request) -> None:
        self.num_preemptions += 1

    def stats(self) -> dict[str, float]:
        return {"preemptions": self.num_preemptions}


def make_admission_policy(
    config: ProximaConfig, manager: ProximaKVCacheManager
) -> AdmissionPolicy:
    return AdmissionPolicy(manager)
