"""Admission by projected peak KV use, and the preemption-victim policy.

Stock vLLM admits a waiting request whenever its prompt fits the free slots;
running requests then cannot all grow and are recompute-preempted (620 times
for 1,000 requests on the H200 baseline). Here a request is admitted only if,
with it, the *projected peak* slot demand of every resident request fits the
pool (LightLLM's rule): request ``i`` holding ``c_i`` tokens with ``r_i`` tokens
still to generate holds ``c_i + k`` slots ``k`` decode steps from now while
``k <= r_i``: a step function whose maximum sits at one of the ``r_j``, one
vectorised suffix sum over the requests sorted by ``r`` (O(n log n)).

Pages: the KV cache is read through a
:class:`~vllm_proxima.kv.residency.ResidencyView` in pages of ``B`` tokens
(upstream's block size in the paged layout, 1 in the token layout): request ``i``
then holds ``ceil((c_i + k) / B)`` pages, and the peak is exact in pages (see
:func:`~vllm_proxima.scheduling.projection.projected_peak`).

Shared prefixes (prefix caching on): requests sharing a system prompt pin it
once. So ``c_i`` counts only the tokens request ``i`` holds alone (they free when it
finishes), and every page two or more hold enters once, as ``S``, assumed held
until the peak. A candidate counts all its tokens but the cached ones residents
hold already; those one resident held alone move from its ``c_i`` into ``S``.
A prompt still prefilling finishes later, by the step budget's chunks of the
prompt tokens ahead of it (residents' in order, then this step's admissions).
Not counted: cached slots no request holds above slots one does (a prefix computed
twice in one step, one copy cached, the other extended); they can let even
``conservative`` preempt, rarely (never in the simulations of
docs/benchmarks/cpu-sim-2026-12-03).

Horizon (``--proxima-horizon``, default 128 decode steps): the peak over the next
``H`` steps only (requests alive beyond ``H`` count at their size at ``H``). Over the
whole future (``0``) nothing admitted is preempted, but long outputs keep the pool
idle waiting for peaks far ahead (64 requests of 1,000-2,000 output tokens: 26 % more
steps than stock's admit-and-preempt in the simulator; at 128, stock's steps).

Policies (``--proxima-admission``):
    stock: upstream's behaviour (admit while slots are free; preempt the newest).
    conservative: project with ``max_tokens`` (never exceeds it: with horizon 0,
        no preemption from admission; over-asking clients cost residency).
    adaptive: project with a learned estimate of the output length as a
        fraction of ``max_tokens`` (from finished requests), conditioned on
        what the request already generated, plus ``--proxima-overcommit``.
        Falls back to ``max_tokens`` until enough requests have finished.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vllm_proxima.scheduling.held_bound import HeldBound
from vllm_proxima.scheduling.policy import AdmissionPolicy, Decision
from vllm_proxima.scheduling.reading import Reading, read_fields, row_index
from vllm_proxima.scheduling.victim import cheapest_to_recompute
from vllm_proxima.scheduling.windows import Windows, worst_pages

if TYPE_CHECKING:
    from vllm.v1.request import Request

    from vllm_proxima.config import ProximaConfig
    from vllm_proxima.kv.residency import ResidencyView

READ_EVERY_STEPS = 8
"""Steps one reading of the residents serves (no drafts, and ``KEEP_FROM_RESIDENTS`` or
more; else one): :mod:`vllm_proxima.scheduling.reading` says what it misses meanwhile."""
KEEP_FROM_RESIDENTS = 128
"""Below this many residents a reading serves one step: the pass is cheap there, and in
the simulator's tight pool (60 residents) a kept one cost 2 % more steps."""

MAX_SKIPS_PER_STEP = 4
"""Requests passed over in one step before admission stops (bounds the work)."""
MAX_DEFERRALS = 64
"""Steps a request may be passed over before nothing behind it is admitted."""
RESERVE_AFTER = 16
"""Steps a request may be passed over before later candidates must leave it room: each
step after, the first such request's pages are held back from those behind it, so short
requests stop taking the pages a long one waits for. In the simulator's mixed stream
(10 % long prompts, at saturation) that cut the long class's P95 wait by 26-39 %, for
-2.5 % to +3.7 % steps (docs/benchmarks/cpu-reserve-2026-12-06)."""


class ProjectedPeakPolicy(AdmissionPolicy):
    """Admit only while the projected peak of all resident requests fits."""

    name = "conservative"

    def __init__(
        self,
        view: ResidencyView,
        overcommit: float = 0.0,
        learn: bool = False,
        chunk_tokens: int = 2048,
        horizon: int = 0,
        read_every: int = READ_EVERY_STEPS,
    ) -> None:
        super().__init__(view, overcommit)
        self.horizon = horizon  # 0: the whole future
        self.learn = learn
        self.chunk_tokens = max(1, chunk_tokens)  # prompt tokens prefilled per step at most
        if learn:
            self.name = "adaptive"
        self._reading: Reading | None = None  # the residents as last read (None: not yet)
        self._step = 0
        self._queued = 0  # prompt tokens still to prefill, of residents and of admissions
        self._skips = 0
        self._deferrals: dict[str, int] = {}
        # Pages a deferred request adds to those held (its last evaluation), and the pages
        # held back this step for the first one passed over RESERVE_AFTER times.
        self._needs: dict[str, int] = {}
        self._reserve = 0
        self._reserved_for: str | None = None
        # NOTE: without a departure the combined projected peak only grows
        # (residents advance while the candidates wait), so a candidate set that
        # failed stays failed until a request leaves: _gen counts departures and
        # _failed_gen remembers the last one a "stop" was decided under.
        self._gen = 0
        self._failed_gen = -1
        # Fast path: pages each admitted request would hold at its max_tokens, and their
        # sum. While the sum fits the pool, so does any projected peak (it is never above
        # the sum of final sizes): admit in O(1), with no pass over the residents.
        self._worst: dict[str, int] = {}
        self._worst_sum = 0
        self._held = HeldBound(view)  # the second fast path
        # A request that failed by ``over`` pages fails again until departures free at
        # least that many pages (residents only advance towards their finish; what
        # departs frees at most its max_tokens pages): request id -> (over, _freed then).
        self._freed = 0
        self._failed: dict[str, tuple[int, int]] = {}
        # Window pages of sliding-window groups (None: one full group, plain projection).
        shape = getattr(view, "shape", None)
        self._win = (
            Windows(shape, self.chunk_tokens, view.max_model_len, view.lookahead_tokens)
            if shape is not None and not shape.uniform
            else None
        )
        self._chunk_steps: np.ndarray | None = None
        # Drafts (counted in lookahead_tokens) advance several tokens a step: a kept reading
        # would under-count them.
        self.read_every = 1 if view.lookahead_tokens else max(1, read_every)

    def begin_step(self) -> None:
        self._step += 1
        reading = self._reading
        if reading is not None and self._step - reading.step >= reading.lasts:
            self._reading = None
        self._skips = 0
        self._reserve = 0
        self._reserved_for = None
        if self._transient():
            # A resident's prompt window pages are freed once it is in: the peak can fall
            # without a departure, so what failed may fit this step.
            self._gen += 1

    def _transient(self) -> bool:
        """Whether a resident still holds its prompt's window pages (so the peak can
        fall without a departure)."""
        if self._win is None:
            return False
        reading = self._reading
        return self._win.transient(self._step - reading.step if reading is not None else 0)

    def _capacity(self) -> int:
        return int(self.view.capacity() * (1.0 + (self.overcommit if self.learn else 0.0)))

    def _resident(self, running: list[Request]) -> Reading:
        """Read and project the resident requests: at most once a step, and once every
        ``read_every`` steps where that is allowed."""
        total, computed, generated, max_tokens = read_fields(running)
        res = self.view.residents(running, total)
        lasts = self.read_every if len(running) >= KEEP_FROM_RESIDENTS else 1
        index = row_index(running) if lasts > 1 else None
        remaining = self._project(total, computed, generated, max_tokens)
        if self._win is not None:
            prompts = np.fromiter((r.num_prompt_tokens for r in running), np.int64, len(running))
            assert self._chunk_steps is not None
            self._win.residents(res.window, total, computed, prompts, max_tokens, self._chunk_steps)
        self._reading = Reading(
            res,
            res.own,
            remaining,
            res.shared,
            self._step,
            self.view.page_size,
            self.horizon,
            self._win,
            lasts,
            index,
        )
        return self._reading

    def _project(
        self,
        total: np.ndarray,
        computed: np.ndarray,
        generated: np.ndarray,
        max_tokens: np.ndarray,
    ) -> np.ndarray:
        """Steps until each resident finishes, from its tokens (``total``), those
        computed, those generated and its ``max_tokens``; sets ``_queued``, the
        prompt tokens still to prefill (the step budget serves them in order)."""
        final = self.lengths.final_lengths(generated, max_tokens) if self.learn else max_tokens
        # A request never outgrows the model length.
        remaining = np.minimum(
            np.maximum(final - generated, 0), np.maximum(self.view.max_model_len - total, 0)
        )
        # A prompt still being prefilled starts decoding (and so finishes) later: one
        # step per chunk of prompt left beyond the chunk that samples its first token,
        # counting the prompt tokens the step budget serves before it.
        left = np.maximum(total - computed, 0)
        queue = np.cumsum(left)
        self._queued = int(queue[-1]) if queue.size else 0
        chunks = np.where(left > 0, -(-queue // self.chunk_tokens), 0)
        self._chunk_steps = chunks
        return remaining + np.maximum(chunks - 1, 0)

    def _project_one(self, request: Request, computed: int, ahead: int) -> int:
        """:meth:`_project` for one candidate behind ``ahead`` queued prompt tokens, in
        scalars (a dozen numpy calls on one-element arrays cost ~30 us)."""
        generated = request.num_output_tokens
        max_tokens = request.max_tokens
        final = self.lengths.final_length(generated, max_tokens) if self.learn else max_tokens
        total = request.num_tokens
        remaining = min(max(final - generated, 0), max(self.view.max_model_len - total, 0))
        left = max(total - computed, 0)
        if left > 0:
            remaining += max(-(-(ahead + left) // self.chunk_tokens) - 1, 0)
        return remaining

    def decide(
        self,
        request: Request,
        num_new_tokens: int,
        num_computed_tokens: int,
        computed_blocks: Any,
        running: list[Request],
    ) -> Decision:
        if self._failed_gen == self._gen:
            return "stop"  # nothing left since the last failed attempt
        worst = self._worst_pages(request)
        reading = self._reading
        if (
            (reading is None or reading.step != self._step)
            and len(running) <= len(self._worst)
            and self._worst_sum - self._worst.get(request.request_id, 0) + worst
            <= self._capacity() - self._reserve
        ):
            # Not read this step: admitted unread (an earlier reading would miss it).
            self._reading = None
            self._remember(request, worst)
            self.last_projected_peak = self._worst_sum  # an upper bound of the peak
            return "admit"
        failed = self._failed.get(request.request_id)
        if failed is not None and failed[0] > self._freed - failed[1]:
            return self._defer(request)
        # Its own: all its tokens but the cached pages residents hold already. Those one
        # resident held alone become shared: out of that resident's own, into S. The hit
        # is read from the argument; placing it among the residents needs them read.
        hit = self.view.hit(request, computed_blocks, num_computed_tokens)
        page, cap = self.view.page_size, self._capacity() - self._reserve
        fulls, low = 1, 0
        if self._win is not None:
            fulls = self._win.shape.full
            low = self._win.candidate(request, num_computed_tokens, self._queued)
        need = fulls * -(-self.view.own_tokens(request, hit.pinned) // page) + low
        if self.view.held_pages() + need > cap:
            # Cheap reject: the peak is at least what is held now plus its own pages
            # (a full pool in a burst: no pass over the residents needed; ``hit.pinned``
            # bounds what it shares from above, so its own pages from below).
            self._needs[request.request_id] = need
            return self._defer(request)
        if reading is None and self._fits_held(worst, hit.pinned, running):
            # Held now plus what each may still add fits: so does any projected peak.
            self._remember(request, worst)
            self.last_projected_peak = self._held.last  # an upper bound of the peak
            return "admit"
        reading = reading or self._resident(running)
        pinned, moves = hit.against(reading.residents)
        if moves and not reading.current(self._step):
            # Its hit moves pages of residents: their rows must be this step's.
            reading = self._resident(running)
            pinned, moves = hit.against(reading.residents)
        own = self.view.own_tokens(request, pinned)
        rem = self._project_one(request, num_computed_tokens, self._queued)
        moved = reading.move(own, rem, moves, fulls) if moves else None
        peak = reading.peak(own, rem, self._step, moved, cap)
        if peak <= cap or not running:
            reading.join(request.request_id, own, rem, self._step, moved)
            if self._win is not None:
                self._win.admit(self._step - reading.step)
            self._queued += max(request.num_tokens - num_computed_tokens, 0)
            self.last_projected_peak = peak
            self._remember(request, worst)
            return "admit"
        # Between departures every resident only grows, so neither the peak nor its
        # part within a horizon sliding forward can fall: remember by how much it failed
        # (windows: unless a resident still holds its prompt's window pages).
        # (Not while pages are held back: part of the failure is theirs, gone next step.)
        if not self._transient() and not self._reserve:
            self._failed[request.request_id] = (peak - cap, self._freed)
        self._needs[request.request_id] = fulls * -(-own // page) + low
        return self._defer(request)

    def _fits_held(self, worst: int, pinned: int, running: list[Request]) -> bool:
        """The second fast path (:mod:`~vllm_proxima.scheduling.held_bound`): pages held
        now, what residents may add, and the candidate's ``max_tokens`` pages less the
        pages of its hit others hold fit the pool."""
        if self._win is not None:  # one full-attention group only
            return False
        new = max(worst - pinned, 0) + self._reserve
        return self._held.fits(self._worst, running, new, self._capacity())

    def _defer(self, request: Request) -> Decision:
        """Skip the request this step, or stop admitting when it waited long enough."""
        self.num_deferred += 1
        waited = self._deferrals.get(request.request_id, 0) + 1
        self._deferrals[request.request_id] = waited
        if waited > RESERVE_AFTER and self._reserved_for is None:
            # Those behind it leave it room from now on this step.
            self._reserved_for = request.request_id
            page = self.view.page_size
            self._reserve = self._needs.get(request.request_id, -(-request.num_tokens // page))
        self._skips += 1
        if waited > MAX_DEFERRALS or self._skips >= MAX_SKIPS_PER_STEP:
            # The head has waited long enough: admit nothing behind it.
            self._failed_gen = self._gen
            return "stop"
        return "skip"

    def _worst_pages(self, request: Request) -> int:
        """Pages the request holds at its ``max_tokens`` (or the model length)."""
        view = self.view
        final = min(request.num_prompt_tokens + request.max_tokens, view.max_model_len)
        shape = view.shape if self._win is not None else None
        return worst_pages(final + view.lookahead_tokens, view.page_size, shape)

    def _remember(self, request: Request, worst: int) -> None:
        """An admission: its worst case joins the fast path's sum."""
        self._worst_sum += worst - self._worst.get(request.request_id, 0)
        self._worst[request.request_id] = worst
        self._deferrals.pop(request.request_id, None)
        self._needs.pop(request.request_id, None)
        self._failed.pop(request.request_id, None)

    def _forget(self, request: Request) -> None:
        if self._reading is not None and not self._reading.leave(request.request_id):
            self._reading = None
        worst = self._worst.pop(request.request_id, 0)
        self._worst_sum -= worst
        self._freed += worst
        self._failed.pop(request.request_id, None)
        self._needs.pop(request.request_id, None)

    def pick_victim(self, running: list[Request], req_index: int) -> int:
        return cheapest_to_recompute(running, req_index)

    def on_finish(self, request: Request) -> None:
        super().on_finish(request)
        self._deferrals.pop(request.request_id, None)

    def on_release(self, request: Request) -> None:
        self._gen += 1
        self._forget(request)

    def on_preempt(self, request: Request) -> None:
        super().on_preempt(request)
        self._gen += 1
        self._forget(request)


def make_admission_policy(
    config: ProximaConfig, view: ResidencyView, chunk_tokens: int
) -> AdmissionPolicy:
    """The policy named by ``--proxima-admission``; ``chunk_tokens``: the scheduler's
    ``max_num_batched_tokens`` (the most prompt tokens one step prefills)."""
    if config.admission == "stock":
        return AdmissionPolicy(view)
    learn = config.admission == "adaptive"  # else conservative (overcommit unused)
    return ProjectedPeakPolicy(
        view, config.overcommit, learn=learn, chunk_tokens=chunk_tokens, horizon=config.horizon
    )
