"""The proxima scheduler: upstream's scheduler with projected-peak admission.

In the paged layout (the default) the KV cache manager is upstream's own and the
admission policy reads it through :class:`~vllm_proxima.kv.paged.PagedResidency`;
in the token layout the manager is proxima's pool of 1-token slots.

vLLM builds the scheduler named by ``--scheduler-cls``; proxima mode names
:func:`proxima_scheduler`, which returns the synchronous or the asynchronous
variant to match ``async_scheduling`` (upstream picks ``AsyncScheduler`` the
same way when no class is named). Both variants share
:class:`ProximaSchedulerMixin`, which overrides only the extension points the
patch series adds to upstream's ``Scheduler``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal, cast

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from vllm_proxima.config import ProximaConfig, check_kv_cache_config, check_model_runner
from vllm_proxima.kv.manager import ProximaKVCacheManager
from vllm_proxima.kv.paged import PagedResidency, UnprojectableKVCache, kv_cache_shape
from vllm_proxima.kv.residency import ResidencyView, TokenResidency
from vllm_proxima.metrics import to_deltas
from vllm_proxima.scheduling.admission import AdmissionPolicy, make_admission_policy
from vllm_proxima.upstream_compat import SCHEDULER_RECORDS_HITS

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.request import Request

logger = logging.getLogger("vllm.proxima")

STATS_EVERY = 8
"""proxima:* figures are reported every this many steps (and every idle step)."""
RECOUNT_EVERY_S = 1.0
"""The paged layout's cached-page recount (one pass over the pool) runs at most this
often while requests run: ~0.8 ms at 4,700 pages, which every 16th step was most of
proxima's per-step CPU above stock's at batch 32 (the scheduler simulation)."""


class ProximaSchedulerMixin:
    """Overrides of the scheduler extension points for proxima mode."""

    # NOTE: in the token layout this is a ProximaKVCacheManager, which duck-types
    # upstream's KVCacheManager (upstream has no base class or protocol to name).
    kv_cache_manager: KVCacheManager
    running: list[Request]
    proxima_config: ProximaConfig
    admission: AdmissionPolicy
    residency_view: ResidencyView | None
    prefill_capacity_bound: bool  # upstream's (DP prefill balancing)
    _named_victim: tuple[int, Request] | None = None  # (index in running, request): see below

    def _make_kv_cache_manager(self, **kwargs: Any) -> KVCacheManager:
        vllm_config: VllmConfig = self.vllm_config  # type: ignore[attr-defined]
        self.proxima_config = ProximaConfig.from_vllm_config(vllm_config).resolved()
        self._stats_calls = 0
        self._stats_skipped = 0
        self._slow_stats: dict[str, float] = {}
        self._recounted_at = -RECOUNT_EVERY_S
        self._emitted_totals: dict[str, float] = {}
        # Where the scheduler's CPU time goes (proxima:*_seconds_total, per step).
        self._steps = 0
        self._schedule_s = 0.0
        self._admission_s = 0.0
        self._held_this_step = False  # the admission held a request back this step
        manager: KVCacheManager
        if self.proxima_config.token_layout:
            token_manager = self._make_token_manager(vllm_config, kwargs)
            self.residency_view = TokenResidency.of(token_manager)
            manager = cast("KVCacheManager", token_manager)  # see kv_cache_manager's NOTE
        else:
            manager = super()._make_kv_cache_manager(**kwargs)  # type: ignore[misc]
            self.residency_view = self._paged_view(manager)
        config = self.proxima_config
        if self.residency_view is None:
            config = ProximaConfig(mode="on", admission="stock")
        self.admission = make_admission_policy(
            config,
            self.residency_view,  # type: ignore[arg-type]
            self.scheduler_config.max_num_batched_tokens,  # type: ignore[attr-defined]
        )
        return manager

    def _make_token_manager(
        self, vllm_config: VllmConfig, kwargs: dict[str, Any]
    ) -> ProximaKVCacheManager:
        kv_cache_config = kwargs["kv_cache_config"]
        check_kv_cache_config(kv_cache_config, kwargs["scheduler_block_size"])
        check_model_runner(vllm_config)
        return ProximaKVCacheManager(
            num_slots=kv_cache_config.num_blocks,
            max_model_len=kwargs["max_model_len"],
            log_stats=kwargs.get("log_stats", False),
            watermark=kwargs.get("watermark", 0.0),
            debug=self.proxima_config.debug_invariants,
            prefix_sharing=bool(self.proxima_config.prefix_sharing),
            evict=self.proxima_config.eviction,
        )

    def _paged_view(self, manager: KVCacheManager) -> PagedResidency | None:
        """The admission's view of upstream's block pool, or ``None`` (with a warning)
        where the projection does not model the KV cache: then admission is vLLM's."""
        vllm_config: VllmConfig = self.vllm_config  # type: ignore[attr-defined]
        lookahead = int(getattr(self, "num_lookahead_tokens", 0))
        spec = int(getattr(self, "num_spec_tokens", 0) or 0)
        batches = max(1, int(vllm_config.max_concurrent_batches))
        chunk = int(self.scheduler_config.max_num_batched_tokens)  # type: ignore[attr-defined]
        try:
            # What one allocation gives slots to beyond the processed tokens: the steps
            # in flight and this one (a decode step: a token and its drafts; a prefill
            # step: a chunk), and the lookahead.
            shape = kv_cache_shape(
                manager,
                decode_step=batches * (1 + spec) + lookahead,
                prefill_step=batches * max(chunk, 1 + spec) + lookahead,
                batches=batches,
            )
        except UnprojectableKVCache as e:
            logger.warning(
                "proxima: %s: projected-peak admission does not model it yet, so admission "
                "is vLLM's own (admit while blocks are free) for this model",
                e,
            )
            return None
        # A request may hold more than its final tokens: the lookahead slots and, in its
        # last steps, drafts scheduled past ``max_tokens`` (vLLM does not trim them; an
        # n-gram proposer reserves no lookahead but its drafts still take slots).
        view = PagedResidency(manager, shape, lookahead + spec)
        logger.info(
            "proxima: projected-peak admission over vLLM's KV pages: %d pages of %d tokens, "
            "%d full-attention and %d sliding-window group(s) (the attention backend is "
            "vLLM's choice for this GPU and model)",
            view.capacity(),
            shape.page_size,
            shape.full,
            len(shape.windows),
        )
        return view

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        self.admission.begin_step()
        self._held_this_step = False
        prefills_deferred = self._prefills_deferred(*args, **kwargs)
        try:
            return super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            if self._held_this_step and not prefills_deferred:
                self.prefill_capacity_bound = True
            self._schedule_s += time.perf_counter() - start
            self._steps += 1

    def _prefills_deferred(self, *args: Any, **kwargs: Any) -> bool:
        """Upstream's ``defer_prefills`` for the step about to run (DP prefill balancing).

        On a step that is not deferred, upstream records ``prefill_capacity_bound =
        bool(self.waiting)``: requests were left waiting for capacity, so the next throttled
        step must not hold prefills back. On vLLM 0.26 a request the admission holds back
        sits in the skipped-waiting queue, not in ``waiting``, so upstream would read a
        capacity-bound step as drained; :meth:`schedule` sets the flag for it. (From 0.32
        a held request stays in ``waiting`` and upstream counts it already.) On a deferred
        step upstream records nothing; its waiting prefills are passed over before admission
        is asked, so the guard is for a request whose prompt was cached but for its last
        token."""
        throttle_prefills = kwargs.get("throttle_prefills", args[0] if args else False)
        return (
            bool(throttle_prefills)
            and not getattr(self, "prefill_capacity_bound", True)
            and any(not r.is_prefill_chunk for r in self.running)
        )

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        from vllm.v1.request import RequestStatus

        if request.status != RequestStatus.FINISHED_ABORTED:
            self.admission.on_finish(request)
        self.admission.on_release(request)
        return super()._free_request(request, *args, **kwargs)  # type: ignore[misc]

    def _admission_decision(  # type: ignore[override]
        self,
        request: Request,
        num_new_tokens: int,
        num_computed_tokens: int,
        new_computed_blocks: Any,
    ) -> Literal["admit", "skip", "stop"]:
        start = time.perf_counter()
        decision = self.admission.decide(
            request, num_new_tokens, num_computed_tokens, new_computed_blocks, self.running
        )
        if decision != "admit":
            self._held_this_step = True
            self._uncount_lookup(request, new_computed_blocks)
        self._admission_s += time.perf_counter() - start
        return decision

    def _uncount_lookup(self, request: Request, new_computed_blocks: Any) -> None:
        """A deferred request is looked up in the prefix cache again next step: take
        this step's lookup back out of vLLM's prefix-cache stats, so
        ``vllm:prefix_cache_queries`` counts each admission once, as without proxima.
        From vLLM 0.27 upstream's scheduler records the lookup only at admission: nothing
        to take back."""
        stats = getattr(self.kv_cache_manager, "prefix_cache_stats", None)
        view = self.residency_view
        if SCHEDULER_RECORDS_HITS or stats is None or view is None or request.num_computed_tokens:
            return
        blocks = new_computed_blocks.blocks[0] if new_computed_blocks is not None else ()
        hits = len(blocks) * view.page_size
        if request.num_preemptions > 0:
            stats.preempted_requests -= 1
            stats.preempted_queries -= request.num_tokens
            stats.preempted_hits -= hits
        else:
            stats.requests -= 1
            stats.queries -= request.num_tokens
            stats.hits -= hits

    def _preemption_victim(self, req_index: int) -> Request:
        """The victim, named before it is popped (vLLM 0.32+ checks in between that its
        blocks can be freed, so the check must read the request popped next)."""
        index = self.admission.pick_victim(self.running, req_index)
        self._named_victim = (index, self.running[index])
        return self.running[index]

    def _pop_preemption_victim(self, req_index: int) -> Request:  # type: ignore[override]
        named, self._named_victim = self._named_victim, None
        # vLLM 0.32+: the one _preemption_victim named (nothing moves in between; checked
        # anyway); vLLM 0.26: one call picks and pops.
        if (
            named is not None
            and named[0] < len(self.running)
            and self.running[named[0]] is named[1]
        ):
            victim_index = named[0]
        else:
            victim_index = self.admission.pick_victim(self.running, req_index)
        victim = self.running.pop(victim_index)
        self.admission.on_preempt(victim)
        return victim

    def _make_plugin_stats(self) -> dict[str, Any] | None:  # type: ignore[override]
        # Every STATS_EVERY-th step, and every step while idle (figures exact when
        # nothing runs): built here and shipped to the API server, a report a step
        # was measurable work at small batches. Counters travel as increases, so
        # nothing is lost between reports.
        self._stats_skipped += 1
        if self.running and self._stats_skipped < STATS_EVERY:
            return None
        self._stats_skipped = 0
        manager = self.kv_cache_manager
        if isinstance(manager, ProximaKVCacheManager):
            stats = self._token_stats(manager)
        else:
            stats = self._paged_stats()
        stats.update(self.admission.stats())
        if not self.running:  # nothing resident: nothing projected
            stats["projected_peak_pages"] = 0
        stats.update(
            steps=self._steps,
            schedule_seconds=self._schedule_s,
            admission_seconds=self._admission_s,
        )
        return {"proxima": to_deltas(stats, self._emitted_totals)}

    def _paged_stats(self) -> dict[str, float]:
        view = self.residency_view
        if not isinstance(view, PagedResidency):
            return {}
        # Cached pages nobody holds: one pass over the pool, at most once a second
        # while requests run, and whenever nothing runs (the idle figures exact).
        now = time.monotonic()
        if not self.running or now - self._recounted_at >= RECOUNT_EVERY_S:
            self._slow_stats = {"evictable_pages": view.evictable_pages()}
            self._recounted_at = now
        self._stats_calls += 1
        page = view.page_size
        total = view.pool.num_gpu_blocks - 1
        held = view.held_pages()
        cached = min(int(self._slow_stats.get("evictable_pages", 0)), total - held)
        return {
            "page_size": page,
            "slots_total": total * page,
            "slots_used": held * page,
            "slots_cached": cached * page,
            "slots_free": (total - held - cached) * page,
        }

    def _token_stats(self, manager: ProximaKVCacheManager) -> dict[str, float]:
        pool = manager.pool
        # O(requests) and O(num_slots) figures every 2nd report (~30 us and ~0.5 ms a
        # call at 16k slots); counters among them are emitted as deltas, so none is lost.
        if self._stats_calls % 2 == 0:
            self._slow_stats = {"stranded_block16": manager.stranded_by_block16()}
            if manager.cache is not None:
                self._slow_stats.update(manager.cache_stats())
            self._slow_stats["evictable"] = (
                manager.cache.num_evictable_slots if manager.cache is not None else 0
            )
        elif not self.running and manager.cache is not None:
            self._slow_stats["evictable"] = manager.cache.num_evictable_slots
        self._stats_calls += 1
        cached = int(self._slow_stats.get("evictable", 0))
        used = max(0, pool.num_used - cached)
        return {
            "page_size": 1,
            "slots_total": pool.num_usable,
            "slots_used": used,
            "slots_cached": pool.num_used - used,
            "slots_free": pool.num_free,
            **{k: v for k, v in self._slow_stats.items() if k != "evictable"},
        }


class ProximaScheduler(ProximaSchedulerMixin, Scheduler):
    """Synchronous scheduling (``--no-async-scheduling``, and on CPU)."""


class ProximaAsyncScheduler(ProximaSchedulerMixin, AsyncScheduler):
    """Asynchronous scheduling (vLLM's default on GPU)."""


def proxima_scheduler(vllm_config: VllmConfig, **kwargs: Any) -> Scheduler:
    """The value of ``--scheduler-cls`` in proxima mode: picks the variant."""
    cls = (
        ProximaAsyncScheduler if vllm_config.scheduler_config.async_scheduling else ProximaScheduler
    )
    return cls(vllm_config=vllm_config, **kwargs)
