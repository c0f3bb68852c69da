"""The admission policy's interface, and upstream's behaviour as the ``stock`` policy.

The scheduler calls these hooks (:mod:`vllm_proxima.scheduling.scheduler`);
:class:`~vllm_proxima.scheduling.admission.ProjectedPeakPolicy` overrides them with
projected-peak admission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from vllm_proxima.scheduling.lengths import OutputLengthModel

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.kv.residency import ResidencyView

Decision = Literal["admit", "skip", "stop"]


class AdmissionPolicy:
    """Upstream's behaviour: admit while slots are free; preempt the newest."""

    name = "stock"

    def __init__(self, view: ResidencyView, overcommit: float = 0.0) -> None:
        self.view = view
        self.overcommit = overcommit
        self.num_preemptions = 0
        self.num_deferred = 0
        self.last_projected_peak = 0
        self.lengths = OutputLengthModel()

    # -- scheduler hooks -------------------------------------------------
    def begin_step(self) -> None:
        """Called at the start of every scheduling step."""

    def decide(
        self,
        request: Request,
        num_new_tokens: int,
        num_computed_tokens: int,
        computed_blocks: Any,
        running: list[Request],
    ) -> Decision:
        """Admit, skip or stop, for a waiting request whose prefix-cache hit is
        ``computed_blocks`` (not yet referenced), covering ``num_computed_tokens``."""
        return "admit"

    def pick_victim(self, running: list[Request], req_index: int) -> int:
        """Index in ``running`` (at or after ``req_index``) of the request to preempt."""
        return len(running) - 1

    def on_preempt(self, request: Request) -> None:
        self.num_preemptions += 1

    def on_finish(self, request: Request) -> None:
        """A request finished normally (not aborted): learn from it."""
        self.lengths.observe(request.num_output_tokens, request.max_tokens)

    def on_release(self, request: Request) -> None:
        """A request left the resident set (finished or aborted)."""

    def stats(self) -> dict[str, float]:
        return {
            "preemptions": self.num_preemptions,
            "admissions_deferred": self.num_deferred,
            "projected_peak_pages": self.last_projected_peak,
        }
