"""Drive vLLM's real scheduler with a fake model: scheduling behaviour on a CPU.

The scheduler (stock ``Scheduler`` at block size 16, or proxima's at block size
1) runs unchanged; only the model is replaced by "every scheduled request whose
prompt is complete samples one token". Scheduling is deterministic given the
workload, so preemptions, recomputed tokens and residency per step match what
the same workload produces on a GPU with synchronous scheduling. Time is
counted in steps, not seconds.

The harness drives the scheduler only through its public surface, as the engine
core does: ``add_request``, ``schedule`` (timed at this call site), the
``SchedulerOutput`` it returns (preemptions: ``preempted_req_ids``; computed
tokens: ``num_computed_tokens`` of new and resumed requests), ``update_from_output``
and the ``SchedulerStats`` it returns (``kv_cache_usage`` for the KV in use, and
proxima's ``plugin_stats`` for prefix-cache evictions). Requests that end before
``max_tokens`` stop on a stop token, as an EOS ends them in the engine.

``python -m proxima_bench.sim.simulate --model models/tiny-llama --kv-slots 16384``
prints one JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from proxima_bench.workloads.lengths import Baseline

STOP_TOKEN = 7  # what the fake model samples; ends requests whose output is under max_tokens
FILL_TOKEN = 8  # sampled instead while such a request is under its min_tokens


@dataclass(slots=True)
class Workload:
    """Requests submitted at step 0 (``arrival_step`` optional)."""

    prompt_lens: list[int]
    output_lens: list[int]
    max_tokens: list[int]
    arrival_steps: list[int] = field(default_factory=list)
    # Explicit token ids (shared prefixes); None: random ids of prompt_lens.
    prompts: list[list[int] | None] | None = None
    # Chat turns: when request i finishes, chain[i] = (j, message) is submitted
    # with prompt = i's prompt + i's output + message.
    chain: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    # Each request's class where a workload has several (``mixed``: "long", "short").
    classes: list[str] = field(default_factory=list)

    @classmethod
    def from_prompts(
        cls,
        prompts: list[list[int] | None],
        output_lens: list[int],
        chain: dict[int, tuple[int, list[int]]] | None = None,
    ) -> Workload:
        """Given token ids (``None`` for chat turns made at run time)."""
        return cls(
            [len(p) if p is not None else 0 for p in prompts],
            list(output_lens),
            list(output_lens),
            [0] * len(prompts),
            list(prompts),
            dict(chain or {}),
        )

    @classmethod
    def uniform(
        cls,
        n: int = 1000,
        prompt: tuple[int, int] = Baseline.prompt,
        output: tuple[int, int] = Baseline.output,
        max_tokens_factor: float = 1.0,
        seed: int = 0,
    ) -> Workload:
        """The brief's baseline (the serving ``baseline`` workload's lengths): prompt
        U[50,200], output U[32,256], all at once."""
        requests = Baseline(prompt=prompt, output=output).sample(n, seed)
        plens = [r.prompt_len for r in requests]
        olens = [r.output_len for r in requests]
        maxt = [int(np.ceil(o * max_tokens_factor)) for o in olens]
        return cls(plens, olens, maxt, [0] * n)

    @classmethod
    def mixed(
        cls, n: int = 300, rate: float = 0.45, long_share: float = 0.1, seed: int = 0
    ) -> Workload:
        """The serving matrix's ``mixed`` stream in steps: the brief's mix (prompt
        U[50,200], output U[32,256]) with ``long_share`` long prompts (U[1500,3000],
        output U[16,64]), arriving at ``rate`` requests a step (exponential gaps)."""
        rng = np.random.default_rng(seed)
        plens: list[int] = []
        olens: list[int] = []
        arrivals: list[int] = []
        classes: list[str] = []
        t = 0.0
        for _ in range(n):
            long = bool(rng.random() < long_share)
            prompt, output = ((1500, 3000), (16, 64)) if long else ((50, 200), (32, 256))
            plens.append(int(rng.integers(prompt[0], prompt[1] + 1)))
            olens.append(int(rng.integers(output[0], output[1] + 1)))
            classes.append("long" if long else "short")
            t += rng.exponential(1.0 / rate)
            arrivals.append(int(t))
        return cls(plens, olens, list(olens), arrivals, classes=classes)


class StepTimes:
    """An ``on_step`` recorder: the step each request first computed its whole prompt
    (its first token, in steps) and the first step it was gone (finished).

    ``waits(workload, cls)`` gives the per-request (first token, end-to-end) steps from
    arrival for one class (all requests with ``cls=None``)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.step = 0
        self.first: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self._live: set[str] = set()

    def __call__(self, out: Any) -> None:
        requests = self.scheduler.requests
        for rid in [r for r in self._live if r not in requests]:
            self.done[rid] = self.step
            self._live.discard(rid)
        for rid, n in out.num_scheduled_tokens.items():
            self._live.add(rid)
            req = requests[rid]
            if rid not in self.first and req.num_computed_tokens + n >= req.num_prompt_tokens:
                self.first[rid] = self.step
        self.step += 1

    def waits(self, workload: Workload, cls: str | None = None) -> tuple[list[int], list[int]]:
        arrival = workload.arrival_steps or [0] * len(workload.prompt_lens)
        ids = [
            i
            for i in range(len(workload.prompt_lens))
            if cls is None or (workload.classes and workload.classes[i] == cls)
        ]
        first = [self.first[str(i)] - arrival[i] for i in ids if str(i) in self.first]
        e2e = [self.done.get(str(i), self.step) - arrival[i] for i in ids]
        return first, e2e


@dataclass(slots=True)
class SimResult:
    name: str
    steps: int
    finished: int
    preemptions: int
    recomputed_tokens: int  # computed tokens preemptions dropped (a resume may find some cached)
    running_max: int
    running_mean: float
    peak_slots_used: int
    capacity_slots: int
    output_tokens: int
    scheduler_s: float
    per_step_us: float
    busy_steps: int = 0
    busy_schedule_us: float | None = None
    busy_update_us: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first schedule
    evicted_slots: int | None = None  # proxima's prefix cache (None: stock)
    # Tokens the model computed other than decode steps: prompts not found in the
    # cache, and what preempted requests recomputed on resuming. Measured per step.
    prefill_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_scheduler(
    model: str,
    proxima: dict[str, Any] | None,
    kv_slots: int,
    max_num_seqs: int = 1024,
    max_num_batched_tokens: int = 2048,
    max_model_len: int = 4096,
    parallel: dict[str, Any] | None = None,
    prefix_caching: bool = False,
) -> Any:
    """A scheduler as the engine builds it: stock (``proxima=None``) at block
    size 16, else proxima's (at block size 16 in the paged layout, 1 in
    ``proxima["kv_layout"] == "token"``), over ``kv_slots`` token slots.

    ``parallel``: ``ParallelConfig`` fields (tensor/pipeline/data parallel sizes and
    ranks) for the engine this scheduler would serve; the default is one GPU.
    ``prefix_caching``: vLLM's block-hash prefix caching (stock and the paged
    layout), or the token layout's token-level sharing (its eviction policy from
    ``proxima["evict"]``).

    A model whose config names ``layer_types`` and a ``sliding_window`` (a Gemma-2/3
    or Mistral-like variant) gets one KV cache layer per layer type, grouped by vLLM's
    own ``get_kv_cache_groups`` (sliding-window and full-attention groups over one
    pool); any other model one full-attention group.
    """
    import torch
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    token = proxima is not None and proxima.get("kv_layout", "paged") == "token"
    block_size = 1 if token else 16
    num_blocks = kv_slots // block_size
    model_config = ModelConfig(
        model=model, dtype="float32", seed=0, max_model_len=max_model_len, skip_tokenizer_init=True
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
        watermark=0.0,
    )
    cache_config = CacheConfig(
        block_size=block_size,
        cache_dtype="auto",
        enable_prefix_caching=prefix_caching and not token,
    )
    additional = (
        {
            "proxima": {
                "mode": "on",
                "prefix_sharing": prefix_caching,
                **proxima,
                "kv_layout": "token" if token else "paged",
            }
        }
        if proxima is not None
        else {"proxima": {"mode": "off"}}
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        parallel_config=ParallelConfig(**(parallel or {})),
        additional_config=additional,
    )
    if getattr(vllm_config.cache_config, "kv_cache_layout", "") is None:
        # vLLM 0.32+: the engine core resolves the physical layout from its workers; the
        # simulator has none, so it pre-sets the identity layout (CacheConfig allows tools to).
        vllm_config.cache_config.kv_cache_layout = "LBHNC"
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    groups = [KVCacheGroupSpec(["layer"], spec)]
    hf = model_config.hf_config
    layer_types = getattr(hf, "layer_types", None)
    window = getattr(hf, "sliding_window", None)
    if layer_types and window and "sliding_attention" in layer_types:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_groups
        from vllm.v1.kv_cache_interface import SlidingWindowSpec

        sliding = SlidingWindowSpec(
            block_size=block_size,
            num_kv_heads=1,
            head_size=1,
            dtype=torch.float32,
            sliding_window=int(window),
        )
        layers = {
            f"layers.{i}": sliding if kind == "sliding_attention" else spec
            for i, kind in enumerate(layer_types)
        }
        groups = get_kv_cache_groups(vllm_config, layers)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=groups,
    )
    cache_config.num_gpu_blocks = num_blocks
    register_all_kvcache_specs(vllm_config)
    kwargs = dict(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
    if proxima is None:
        scheduler = Scheduler(**kwargs)
    else:
        from vllm_proxima.scheduling.scheduler import ProximaScheduler

        scheduler = ProximaScheduler(**kwargs)
    # The outputs the V1 model runner consumes (what the fake model stands in for).
    scheduler.use_v2_model_runner = False
    if cache_config.enable_prefix_caching:
        from vllm.v1.core.kv_cache_utils import init_none_hash

        init_none_hash(_hash_fn(cache_config))  # as the engine core does once at start
    return scheduler


def _hash_fn(cache_config: Any) -> Callable[[Any], bytes]:
    from vllm.utils.hashing import get_hash_fn_by_name

    return get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)


def block_hasher(scheduler: Any) -> Callable[[Any], Any] | None:
    """The request block hasher the engine's front end would give each request, from
    the scheduler's cache config (None without vLLM's block-hash prefix caching)."""
    if not scheduler.cache_config.enable_prefix_caching:
        return None
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher

    return get_request_block_hasher(scheduler.block_size, _hash_fn(scheduler.cache_config))


def simulate(
    scheduler: Any,
    workload: Workload,
    name: str,
    step_limit: int = 200_000,
    busy_fraction: bool = False,
    on_step: Callable[[Any], None] | None = None,
) -> SimResult:
    """Run the workload to completion; returns counts per run.

    ``on_step`` sees every ``SchedulerOutput`` (what the engine would send its workers).
    """
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    rng = np.random.default_rng(1)
    hasher = block_hasher(scheduler)
    chained = {j for j, _ in workload.chain.values()}
    pending = sorted(
        (i for i in range(len(workload.prompt_lens)) if i not in chained),
        key=lambda i: (workload.arrival_steps[i] if workload.arrival_steps else 0, i),
    )
    arrival = workload.arrival_steps or [0] * len(workload.prompt_lens)
    prompts: dict[int, list[int]] = {}
    made: dict[str, Any] = {}  # request id -> Request, to read a finished turn's output
    ready: list[int] = []  # chat turns whose previous turn finished
    seen_new: set[str] = set()
    cached_tokens = prompt_tokens = prefill_tokens = 0
    evicted: int | None = None  # proxima's prefix-cache evictions (plugin stats; None: stock)
    targets: dict[str, int] = {}
    preemptions = 0
    recomputed = 0
    # Tokens each request has computed, as the scheduler outputs say (new and
    # resumed requests carry their computed count; each step adds what it schedules).
    computed: dict[str, int] = {}
    # KV the harness configured: usable pages (the null page excluded) times the page size.
    capacity = (scheduler.kv_cache_config.num_blocks - 1) * scheduler.block_size
    running_sum = 0
    running_max = 0
    peak_used = 0
    finished = 0
    output_tokens = 0
    step = 0
    sched_s = 0.0
    next_pending = 0
    busy_threshold = max(1, int(0.9 * len(pending))) if busy_fraction else 10**9
    busy_sched_s = busy_update_s = 0.0
    busy_steps = 0
    while step < step_limit:
        due: list[int] = []
        while next_pending < len(pending) and arrival[pending[next_pending]] <= step:
            due.append(pending[next_pending])
            next_pending += 1
        due += ready
        ready = []
        for i in due:
            given = workload.prompts[i] if workload.prompts is not None else None
            if i in prompts:
                prompt = prompts[i]
            elif given is not None:
                prompt = list(given)
            else:
                prompt = rng.integers(3, 1000, size=workload.prompt_lens[i]).tolist()
            prompts[i] = prompt
            prompt_tokens += len(prompt)
            stop: dict[str, Any] = {}
            if workload.output_lens[i] < workload.max_tokens[i]:
                # Ends "on EOS" at its true length: the stop token, once min_tokens are out.
                stop = dict(stop_token_ids=[STOP_TOKEN], min_tokens=workload.output_lens[i])
            params = SamplingParams(
                temperature=0.0, max_tokens=workload.max_tokens[i], ignore_eos=True, **stop
            )
            request = Request(
                request_id=str(i),
                prompt_token_ids=prompt,
                sampling_params=params,
                pooling_params=None,
                block_hasher=hasher,
            )
            targets[str(i)] = workload.output_lens[i]
            made[str(i)] = request
            scheduler.add_request(request)
        if not scheduler.has_unfinished_requests() and next_pending >= len(pending) and not ready:
            break
        t0 = time.perf_counter()
        out = scheduler.schedule()
        t1 = time.perf_counter()
        if on_step is not None:
            on_step(out)
        for rid in out.preempted_req_ids or ():
            preemptions += 1
            recomputed += computed.pop(rid, 0)
        for new_req in out.scheduled_new_reqs:
            computed[new_req.req_id] = new_req.num_computed_tokens
            if new_req.req_id not in seen_new:  # first schedule, not a resumption
                seen_new.add(new_req.req_id)
                cached_tokens += new_req.num_computed_tokens
        resumed = out.scheduled_cached_reqs
        for rid, base in zip(resumed.req_ids, resumed.num_computed_tokens, strict=True):
            computed[rid] = base
        for rid, n in out.num_scheduled_tokens.items():
            computed[rid] = computed.get(rid, 0) + n
        if len(scheduler.running) >= busy_threshold:
            busy_sched_s += t1 - t0
            busy_steps += 1
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        finishing = 0
        for rid, n in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            req_ids.append(rid)
            # A decode step: one token after the last one computed, outputs begun.
            if not (
                n == 1
                and request.num_output_tokens
                and request.num_computed_tokens == request.num_tokens
            ):
                prefill_tokens += n
            if request.num_computed_tokens >= request.num_tokens:
                last = request.num_output_tokens + 1 >= targets[rid]
                # A request that ends on EOS samples it only at its true length, as vLLM's
                # sampler masks stop tokens under min_tokens (from vLLM 0.32 the scheduler's
                # stop check no longer looks at min_tokens, so the model must not offer it).
                early = not last and request.sampling_params.stop_token_ids
                sampled.append([FILL_TOKEN if early else STOP_TOKEN])
                if last:
                    finishing += 1
            else:
                sampled.append([])  # a prefill chunk: nothing sampled yet
        model_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: j for j, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        )
        t2 = time.perf_counter()
        engine_outputs = scheduler.update_from_output(out, model_output)
        if len(scheduler.running) >= busy_threshold:
            busy_update_s += time.perf_counter() - t2
        sched_s += time.perf_counter() - t0
        stats = next(
            (o.scheduler_stats for o in engine_outputs.values() if o.scheduler_stats), None
        )
        for rid in req_ids:
            if rid not in scheduler.requests and int(rid) in workload.chain:
                j, message = workload.chain[int(rid)]
                if j not in prompts:
                    prompts[j] = prompts[int(rid)] + list(made[rid].output_token_ids) + message
                    ready.append(j)
        finished += finishing
        output_tokens += sum(1 for t in sampled if t)
        n_running = len(scheduler.running)
        running_sum += n_running
        running_max = max(running_max, n_running)
        if stats is not None:
            # vllm:kv_cache_usage_perc: KV held by requests (cached KV eviction could free
            # counts as free), a fraction of the usable pages.
            peak_used = max(peak_used, round(stats.kv_cache_usage * capacity))
            evicted = _add_evicted(evicted, stats.plugin_stats)
        step += 1
    # proxima refreshes its prefix-cache counters every other report; two more reports
    # (every step reports once nothing runs) carry the increases of the last steps.
    for _ in range(2):
        final = scheduler.make_stats()
        evicted = _add_evicted(evicted, final.plugin_stats if final is not None else None)
    return SimResult(
        name=name,
        steps=step,
        finished=finished,
        preemptions=preemptions,
        recomputed_tokens=recomputed,
        running_max=running_max,
        running_mean=round(running_sum / max(step, 1), 2),
        peak_slots_used=peak_used,
        capacity_slots=capacity,
        output_tokens=output_tokens,
        scheduler_s=round(sched_s, 3),
        per_step_us=round(1e6 * sched_s / max(step, 1), 1),
        busy_steps=busy_steps,
        busy_schedule_us=round(1e6 * busy_sched_s / busy_steps, 1) if busy_steps else None,
        busy_update_us=round(1e6 * busy_update_s / busy_steps, 1) if busy_steps else None,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        prefill_tokens=prefill_tokens,
        evicted_slots=evicted,
    )


def _add_evicted(total: int | None, plugin_stats: dict[str, Any] | None) -> int | None:
    """Add a step's ``proxima:prefix_evicted_slots_total`` increase (reported by the
    token layout's prefix cache; stock and the paged layout have none: None)."""
    delta = ((plugin_stats or {}).get("proxima") or {}).get("evictions")
    if delta is None:
        return total
    return (total or 0) + int(delta)


CONFIGS: dict[str, dict[str, Any] | None] = {
    "stock": None,
    "proxima-stock": {"admission": "stock"},
    "proxima-conservative": {"admission": "conservative"},
    "proxima-adaptive": {"admission": "adaptive"},
    "token-conservative": {"admission": "conservative", "kv_layout": "token"},
    "token-adaptive": {"admission": "adaptive", "kv_layout": "token"},
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/tiny-llama")
    parser.add_argument("--kv-slots", type=int, default=16384)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--max-tokens-factor", type=float, default=1.0)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--overcommit", type=float, default=None)
    parser.add_argument(
        "--busy",
        action="store_true",
        help="time schedule() and update_from_output() only on steps with >= 90%% of the "
        "requests running (use a KV pool large enough to hold them all)",
    )
    parser.add_argument("--output", default="32-256", help="output length range lo-hi")
    parser.add_argument(
        "--workload",
        choices=["uniform", "sysprompt", "chat"],
        default="uniform",
        help="uniform: the brief's baseline; sysprompt: 8 shared system prompts; chat: "
        "--requests/5 conversations of 5 turns (the engine A/B's runs of the same names)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefix-caching",
        action="store_true",
        help="stock: block-hash prefix caching (16-token blocks); proxima: token-level sharing",
    )
    parser.add_argument(
        "--evict", default="lru", help="proxima: eviction policies, comma-separated (one run each)"
    )
    args = parser.parse_args(argv)
    lo, hi = (int(x) for x in args.output.split("-"))
    workload = make_workload(
        args.workload, args.requests, (lo, hi), args.max_tokens_factor, args.seed
    )
    for name in args.configs.split(","):
        proxima = CONFIGS[name]
        if proxima is not None and args.overcommit is not None:
            proxima = {**proxima, "overcommit": args.overcommit}
        token = proxima is not None and proxima.get("kv_layout") == "token"
        evicts = args.evict.split(",") if token and args.prefix_caching else [None]
        for evict in evicts:
            config = proxima if evict is None else {**(proxima or {}), "evict": evict}
            scheduler = make_scheduler(
                args.model,
                config,
                args.kv_slots,
                max_num_seqs=args.max_num_seqs,
                prefix_caching=args.prefix_caching,
            )
            label = name if evict is None else f"{name}-{evict}"
            result = simulate(scheduler, workload, label, busy_fraction=args.busy)
            print(json.dumps(result.to_dict()), flush=True)


def make_workload(
    kind: str,
    requests: int,
    output: tuple[int, int] = (32, 256),
    max_tokens_factor: float = 1.0,
    seed: int = 0,
) -> Workload:
    """The simulator's workloads by name (``uniform``, ``sysprompt``, ``chat``)."""
    from proxima_bench.workloads.tokens import chat_workload, sysprompt_workload

    if kind == "uniform":
        return Workload.uniform(
            requests, output=output, max_tokens_factor=max_tokens_factor, seed=seed
        )
    if kind == "sysprompt":
        prompts, olens = sysprompt_workload(requests, seed, vocab=1000)
        return Workload.from_prompts(list(prompts), olens)
    if kind == "chat":
        chat_prompts, olens, chain = chat_workload(max(1, requests // 5), seed, vocab=1000)
        return Workload.from_prompts(chat_prompts, olens, chain)
    raise ValueError(f"unknown workload {kind!r}")


if __name__ == "__main__":
    main()
