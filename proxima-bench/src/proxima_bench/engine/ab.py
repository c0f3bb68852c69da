"""Engine-level A/B on a GPU: stock vLLM vs proxima, same workload, same run.

One process per engine (``--engine stock-fa3 | stock-triton | proxima``); the
engine is built once and runs several workloads in turn (``--runs``), each
appending one JSON line to ``OUT/results.jsonl`` and its per-step samples to
``OUT/steps_<engine>_<run>.json``. In proxima mode the admission policy is
switched between runs (``--policies``) on the same engine.

Workload (the brief's baseline): 1,000 requests, prompt U[50,200] token ids,
output U[32,256], temperature 0, bf16 Llama-2-7B shape with dummy weights,
``kv_cache_memory_bytes`` 8 GiB, ``max_model_len`` 4096, ``max_num_seqs`` 1024.
Runs:
  base       all requests at t=0, ``max_tokens`` = the output length, ignore_eos.
  mt1.5/mt4  ``max_tokens`` = 1.5x / 4x the output length; each request is
             stopped at its output length (``FINISHED_STOPPED`` in the scheduler,
             as an EOS would), so clients "over-ask".
  overload   Poisson arrivals at ``--overload-rate`` requests/s (default 100,
             about 2x what stock sustains on the H200).
  parity     64 short prompts, greedy, ample KV: token ids kept for comparison.
  sysprompt  issue 8 (a): 8 system prompts of U[200,1000] tokens, user part
             U[20,200], output U[32,256] (use with --prefix-caching).
  chat       issue 8 (b): ``--num-requests``/5 conversations of 5 turns; a turn's
             prompt is the previous turn's prompt, its answer and a new user
             message of U[20,100] tokens (the first turn: the message alone).
             A turn is submitted when the previous one finishes.
With ``--prefix-caching`` the prefix cache is emptied before every measured run;
``--evict lru,lfu,arc`` (proxima) repeats each run once per eviction policy.

Figures (defined as in ../shared/gpu-bundle/bench_baseline.py): KV capacity in
tokens, slot use (tokens held / slots allocated by running requests) at the
peak and on average, running requests max and time-weighted mean, preemptions
and recomputed tokens, wall time, output tok/s, req/s, request latency and TTFT
P50/P95, engine start time, scheduler CPU time per step.

What the harness reads of the engine: the requests' outputs, and a stat logger
(``proxima_bench.engine.stats``) that vLLM hands each step's ``SchedulerStats``
and ``IterationStats``: preemptions, the KV in use (``kv_cache_usage``), proxima's
prefix-cache evictions and scheduler counters. KV capacity and block size come
from the engine's config.

NOTE: figures with no public seam keep the narrowest access, marked
``# private:`` where used: the computed tokens a preemption drops (a wrapper
around ``Scheduler._preempt_request`` that only reads the request), scheduler time
per step for stock vLLM (a timer around ``Scheduler.schedule``; proxima's own
``proxima:schedule_seconds_total`` is reported beside it), tokens held versus
KV allocated by running requests and the token layout's runs per request (read
from the KV manager), stopping a request "on EOS" at its true length
(``Scheduler.finish_requests``: aborting would not teach the adaptive policy),
and switching the admission or eviction policy between runs on one engine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from proxima_bench.engine.stats import stat_logger_factory  # noqa: E402
from proxima_bench.workloads.tokens import (  # noqa: E402
    chat_workload,
    sysprompt_workload,
    workload,
)

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = HERE / "models" / "llama-2-7b"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", required=True, choices=["stock-fa3", "stock-triton", "proxima"])
    p.add_argument(
        "--runs", default="base", help="comma-separated; 'run:policy+policy' picks policies per run"
    )
    p.add_argument("--policies", default="adaptive", help="proxima: admission policies, run each")
    p.add_argument("--model", default=str(DEFAULT_MODEL))
    p.add_argument("--kv-bytes", type=int, default=8 * 1024**3)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=1024)
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--overload-rate", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--prefix-caching",
        action="store_true",
        help="prefix caching on (stock: 16-token blocks; proxima: token-level sharing)",
    )
    p.add_argument(
        "--evict",
        default="",
        help="proxima: comma-separated eviction policies (lru,lfu,arc); each run once per policy",
    )
    p.add_argument(
        "--kv-layout",
        choices=["auto", "paged", "token"],
        default=None,
        help="proxima: KV layout (default auto; --evict needs and implies token)",
    )
    p.add_argument("--vocab", type=int, default=32000, help="prompt token ids are drawn below this")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", type=int, default=1)
    p.add_argument(
        "--distributed-executor-backend",
        choices=["mp", "ray", "uni"],
        default=None,
        help="vLLM's executor (default: vLLM's choice)",
    )
    p.add_argument(
        "--budget-s", type=float, default=1e9, help="skip runs once this much time passed"
    )
    p.add_argument("--out-dir", default=os.environ.get("OUT", "."))
    p.add_argument("--tag", default="")
    return p.parse_args(argv)


def percentile(xs: list[float], q: float) -> float | None:
    import numpy as np

    return round(float(np.percentile(xs, q)), 4) if xs else None


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.out = Path(args.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)

    def build(self) -> dict[str, Any]:
        import torch
        import vllm
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        a = self.a
        kw: dict[str, Any] = dict(
            model=a.model,
            skip_tokenizer_init=True,
            load_format="dummy",
            dtype="bfloat16",
            max_model_len=a.max_model_len,
            max_num_seqs=a.max_num_seqs,
            enable_prefix_caching=a.prefix_caching,
            kv_cache_memory_bytes=a.kv_bytes,
            seed=a.seed,
            enforce_eager=a.enforce_eager,
            tensor_parallel_size=a.tensor_parallel_size,
            pipeline_parallel_size=a.pipeline_parallel_size,
            distributed_executor_backend=a.distributed_executor_backend,
        )
        if a.engine == "stock-triton":
            kw.update(attention_backend="TRITON_ATTN", block_size=16)
        mode = "on" if a.engine == "proxima" else "off"
        options: dict[str, Any] = {"mode": mode}
        if a.engine == "proxima":
            layout = a.kv_layout or ("token" if a.evict else "auto")
            if a.evict and layout != "token":
                raise SystemExit("--evict compares the token layout's policies: --kv-layout token")
            options["kv_layout"] = layout
        kw["additional_config"] = {"proxima": options}
        factory, loggers = stat_logger_factory()
        t0 = time.perf_counter()
        self.engine = LLMEngine.from_engine_args(EngineArgs(**kw), stat_loggers=[factory])
        info: dict[str, Any] = {"init_s": round(time.perf_counter() - t0, 2)}
        if len(loggers) != 1:
            raise RuntimeError(f"expected one engine's stat logger, got {len(loggers)}")
        self.stats = loggers[0]
        cfg = self.engine.vllm_config
        self.block_size = cfg.cache_config.block_size
        self.proxima = a.engine == "proxima"
        self.token = self.proxima and self.block_size == 1  # the token layout's 1-token pages
        # Usable KV: the engine's pages less the null page, in tokens.
        self.capacity = (int(cfg.cache_config.num_gpu_blocks) - 1) * self.block_size
        # private: the scheduler and its KV manager, for the figures listed in the module doc.
        core = self.engine.engine_core.engine_core
        self.sched = core.scheduler
        self.kvm = self.sched.kv_cache_manager
        backends = set()
        for layer in cfg.compilation_config.static_forward_context.values():
            be = getattr(layer, "attn_backend", None)
            if be is not None:
                backends.add(f"{be.get_name()}:{be.__name__}")
        info.update(
            vllm=vllm.__version__,
            torch=torch.__version__,
            gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            block_size=self.block_size,
            kv_capacity_tokens=self.capacity,
            attention_backend=sorted(backends),
            async_scheduling=cfg.scheduler_config.async_scheduling,
            max_num_batched_tokens=cfg.scheduler_config.max_num_batched_tokens,
            cudagraph_mode=str(cfg.compilation_config.cudagraph_mode),
            scheduler_cls=type(self.sched).__name__,
        )
        self.preempt = {"recomputed": 0}
        original = self.sched._preempt_request

        def counting(request: Any, *args: Any, **kwargs: Any) -> Any:
            # private: no public figure says how many computed tokens a preemption drops.
            self.preempt["recomputed"] += request.num_computed_tokens
            return original(request, *args, **kwargs)

        self.sched._preempt_request = counting
        original_schedule = self.sched.schedule
        self.sched_time = {"s": 0.0, "n": 0}

        def timed_schedule(*args: Any, **kwargs: Any) -> Any:
            # private: stock vLLM reports no scheduler time; one timer for both engines.
            t = time.perf_counter()
            try:
                return original_schedule(*args, **kwargs)
            finally:
                self.sched_time["s"] += time.perf_counter() - t
                self.sched_time["n"] += 1

        self.sched.schedule = timed_schedule
        print("ENGINE", json.dumps(info), flush=True)
        return info

    def set_policy(self, name: str) -> None:
        from vllm_proxima.config import ProximaConfig
        from vllm_proxima.scheduling.admission import make_admission_policy

        config = ProximaConfig(mode="on", admission=name)
        self.sched.admission = make_admission_policy(
            config,
            self.sched.residency_view,
            self.sched.scheduler_config.max_num_batched_tokens,
        )

    def set_evict(self, policy: str) -> None:
        """Empty the prefix cache and rebuild it with another eviction policy."""
        if getattr(self.kvm, "cache", None) is None:
            raise RuntimeError("--evict needs --prefix-caching and --engine proxima")
        self.kvm.set_eviction_policy(policy)
        self.evict_policy = policy

    def held_and_alloc(self) -> tuple[int, int]:
        running = self.sched.running
        held = sum(r.num_computed_tokens for r in running)
        if self.token:
            alloc = sum(self.kvm.num_slots_of(r.request_id) for r in running)
        else:
            mgr = self.kvm.coordinator.single_type_managers[0]
            alloc = self.block_size * sum(
                len(mgr.req_to_blocks.get(r.request_id, ())) for r in running
            )
        return held, alloc

    def mean_runs(self) -> float | None:
        """Contiguous runs per request in the pool right now (1 = one run each)."""
        if not self.token or not self.kvm.req_slots:
            return None
        from vllm_proxima.kv.slot_pool import SlotPool

        runs = [SlotPool.runs(h.slots) for h in self.kvm.req_slots.values() if h.n]
        return round(sum(runs) / max(1, len(runs)), 2)

    def used_slots(self) -> int:
        """KV in use after the last step (``vllm:kv_cache_usage_perc``: cached KV that
        eviction could free counts as free), in tokens."""
        return round(self.stats.totals.kv_usage_last * self.capacity)

    def run(
        self,
        name: str,
        prompts: list[list[int]],
        olens: list[int],
        max_tokens: list[int],
        arrivals: list[float] | None = None,
        keep_tokens: bool = False,
        chain: dict[int, tuple[int, list[int]]] | None = None,
    ) -> dict[str, Any]:
        """Run one workload; ``chain`` (chat turns): when request ``i`` finishes,
        request ``chain[i][0]`` is submitted with prompt = ``i``'s prompt, its
        output and ``chain[i][1]``."""
        import math

        import numpy as np
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.request import RequestStatus

        engine = self.engine
        # Warm-up (not timed).
        for i, warm in enumerate([p for p in prompts if p][:8]):
            engine.add_request(
                f"warm-{name}-{i}",
                {"prompt_token_ids": warm[:64]},
                SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, detokenize=False),
            )
        while engine.has_unfinished_requests():
            engine.step()
        # Every run starts from an empty prefix cache (the warm-up and the runs
        # before it must not feed its hits).
        if self.a.prefix_caching and not engine.reset_prefix_cache():
            raise RuntimeError("could not empty the prefix cache before the run")
        self.stats.reset()
        self.preempt.update(recomputed=0)
        self.sched_time.update(s=0.0, n=0)
        self.early_stops = 0

        n = len(prompts)
        chain = chain or {}
        chained = {j for j, _ in chain.values()}
        arrivals = list(arrivals or [0.0] * n)
        for j in chained:
            arrivals[j] = math.inf  # submitted when the previous turn finishes
        order = sorted((i for i in range(n) if i not in chained), key=lambda i: arrivals[i])
        prompts = list(prompts)
        ready: list[int] = []  # chat turns whose previous turn finished
        produced = [0] * n
        cached = [0] * n  # prompt tokens served from the prefix cache, per request
        first_t: list[float | None] = [None] * n
        done_t: list[float | None] = [None] * n
        tokens: dict[int, list[int]] = {}
        ids: dict[str, int] = {}
        runs_samples: list[float] = []
        internal_ids: dict[str, str] = {}
        stop_early = any(m > o for m, o in zip(max_tokens, olens, strict=True))
        steps: list[tuple[float, int, int, int, int, int]] = []
        nxt = 0
        t_start = time.perf_counter()
        while nxt < len(order) or ready or engine.has_unfinished_requests():
            now = time.perf_counter() - t_start
            due: list[int] = []
            while nxt < len(order) and arrivals[order[nxt]] <= now:
                due.append(order[nxt])
                nxt += 1
            due += ready
            ready = []
            for i in due:
                rid = f"{name}-{i}"
                ids[rid] = i
                # The engine keys requests by an internal id (its return value).
                internal_ids[rid] = engine.add_request(
                    rid,
                    {"prompt_token_ids": prompts[i]},
                    SamplingParams(
                        temperature=0.0,
                        max_tokens=max_tokens[i],
                        ignore_eos=True,
                        detokenize=False,
                        output_kind=RequestOutputKind.DELTA,
                    ),
                )
            if not engine.has_unfinished_requests():
                time.sleep(0.0005)
                continue
            outs = engine.step()
            now = time.perf_counter() - t_start
            to_stop = []
            for o in outs:
                i = ids[o.request_id]
                got = len(o.outputs[0].token_ids)
                if got and first_t[i] is None:
                    first_t[i] = now
                produced[i] += got
                cached[i] = max(cached[i], o.num_cached_tokens or 0)
                if keep_tokens or i in chain:
                    tokens.setdefault(i, []).extend(o.outputs[0].token_ids)
                if o.finished:
                    done_t[i] = now
                    if i in chain:
                        j, message = chain[i]
                        prompts[j] = list(prompts[i]) + tokens.pop(i, []) + message
                        arrivals[j] = now
                        ready.append(j)
                elif stop_early and produced[i] >= olens[i]:
                    to_stop.append(o.request_id)
                    done_t[i] = now
            if to_stop:
                # As an EOS would: finished (not aborted) in the scheduler, then
                # the front end forgets them.
                internal = [internal_ids[r] for r in to_stop]
                self.sched.finish_requests(internal, RequestStatus.FINISHED_STOPPED)
                self.early_stops += len(internal)
                engine.abort_request(to_stop)
            if self.token and len(steps) % 50 == 25:
                r = self.mean_runs()
                if r is not None:
                    runs_samples.append(r)
            held, alloc = self.held_and_alloc()
            t = self.stats.totals  # as the engine reported the step (before early stops)
            steps.append((round(now, 4), t.running, t.waiting, self.used_slots(), held, alloc))
        wall = time.perf_counter() - t_start

        totals = self.stats.totals
        out_tokens = int(
            sum(min(p, o) if stop_early else p for p, o in zip(produced, olens, strict=True))
        )
        lat = [d - arrivals[i] for i, d in enumerate(done_t) if d is not None]
        ttft = [f - arrivals[i] for i, f in enumerate(first_t) if f is not None]
        tw = 0.0
        prev = 0.0
        for s in steps:
            tw += s[1] * (s[0] - prev)
            prev = s[0]
        util = [s[4] / s[5] for s in steps if s[5] > 0]
        peak = max(steps, key=lambda s: (s[3], s[4])) if steps else None
        res: dict[str, Any] = {
            "engine": self.a.engine,
            "run": name,
            "policy": getattr(self, "policy", None),
            "tag": self.a.tag,
            "status": "ok",
            "kv_capacity_tokens": self.capacity,
            "block_size": self.block_size,
            "requests": n,
            "finished": sum(d is not None for d in done_t),
            "wall_s": round(wall, 3),
            "output_tokens": out_tokens,
            "output_tok_per_s": round(out_tokens / wall, 1),
            "req_per_s": round(n / wall, 3),
            "preemptions": totals.preemptions,
            "recomputed_tokens": self.preempt["recomputed"],
            "running_max": max((s[1] for s in steps), default=0),
            "running_time_weighted_mean": round(tw / max(wall, 1e-9), 2),
            "slot_use_peak": round(peak[4] / peak[5], 5) if peak and peak[5] else None,
            "slot_use_mean": round(float(np.mean(util)), 5) if util else None,
            "peak_used_slots": peak[3] if peak else 0,
            "peak_pool_use": round(peak[3] / self.capacity, 5) if peak else None,
            "latency_p50_s": percentile(lat, 50),
            "latency_p95_s": percentile(lat, 95),
            "ttft_p50_s": percentile(ttft, 50),
            "ttft_p95_s": percentile(ttft, 95),
            "num_steps": len(steps),
            "early_stops": self.early_stops,
            "prompt_tokens": int(sum(len(p) for p in prompts if p is not None)),
            "prompt_tokens_cached": int(sum(cached)),
            "prompt_tokens_computed": int(sum(len(p) for p in prompts if p is not None))
            - int(sum(cached)),
            "prefix_caching": bool(self.a.prefix_caching),
            "evict_policy": getattr(self, "evict_policy", None),
            "prefix_evicted_slots": totals.evicted_slots,
            "slot_runs_per_request_mean": round(float(np.mean(runs_samples)), 2)
            if runs_samples
            else None,
            "schedule_ms_per_step": round(
                1e3 * self.sched_time["s"] / max(1, self.sched_time["n"]), 4
            ),
            # proxima's own counter (its steps; None for stock).
            "proxima_schedule_ms_per_step": round(
                1e3 * totals.proxima_schedule_s / totals.proxima_steps, 4
            )
            if totals.proxima_steps
            else None,
        }
        with open(self.out / "results.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        with open(self.out / f"steps_{self.a.engine}_{name}.json", "w") as f:
            json.dump(
                {
                    "cols": ["t", "running", "waiting", "used_slots", "tokens_held", "slots_alloc"],
                    "steps": steps,
                },
                f,
                separators=(",", ":"),
            )
        if keep_tokens:
            with open(self.out / f"tokens_{self.a.engine}_{name}.json", "w") as f:
                json.dump({str(k): v for k, v in sorted(tokens.items())}, f)
        print("RESULT", json.dumps(res), flush=True)
        return res


def main(argv: list[str] | None = None) -> None:
    import numpy as np

    a = parse(argv)
    t0 = time.perf_counter()
    bench = Bench(a)
    try:
        info = bench.build()
    except Exception as e:
        import traceback

        rec = {
            "engine": a.engine,
            "status": "engine_init_failed",
            "error": f"{type(e).__name__}: {e}"[:3000],
            "traceback_tail": traceback.format_exc()[-3000:],
        }
        with open(Path(a.out_dir) / "results.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print("RESULT", json.dumps(rec), flush=True)
        sys.stdout.flush()
        os._exit(3)
    with open(Path(a.out_dir) / "engines.jsonl", "a") as f:
        f.write(json.dumps({"engine": a.engine, "tag": a.tag, **info}) + "\n")
    prompts, olens = workload(a.num_requests, a.seed, vocab=a.vocab)
    default_policies = a.policies.split(",")
    seen: dict[str, int] = {}
    for spec in a.runs.split(","):
        # "run" or "run:policy+policy" (proxima only).
        run, _, named = spec.partition(":")
        policies: list[str | None] = [None]
        if a.engine == "proxima":
            policies = list(named.split("+") if named else default_policies)
        evicts: list[str | None] = [None]
        if a.engine == "proxima" and a.evict:
            evicts = list(a.evict.split(","))
        for policy, evict in [(p, e) for p in policies for e in evicts]:
            if time.perf_counter() - t0 > a.budget_s:
                print(f"SKIPPED {a.engine} {run} {policy} {evict}: budget", flush=True)
                continue
            if policy is not None:
                bench.set_policy(policy)
                bench.policy = policy
            if evict is not None:
                bench.set_evict(evict)
            name = run if policy is None else f"{run}-{policy}"
            if evict is not None:
                name += f"-{evict}"
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:  # a repeat: same workload, to measure run-to-run spread
                name = f"{name}-rep{seen[name]}"
            if run == "base":
                bench.run(name, prompts, olens, olens)
            elif run.startswith("mt"):
                factor = float(run[2:])
                bench.run(name, prompts, olens, [int(np.ceil(factor * o)) for o in olens])
            elif run == "overload":
                rng = np.random.default_rng(a.seed + 1)
                arrivals = np.cumsum(
                    rng.exponential(1.0 / a.overload_rate, size=len(prompts))
                ).tolist()
                bench.run(name, prompts, olens, olens, arrivals=arrivals)
            elif run == "sysprompt":
                sp_prompts, sp_olens = sysprompt_workload(a.num_requests, a.seed + 3, a.vocab)
                bench.run(name, sp_prompts, sp_olens, sp_olens)
            elif run == "chat":
                ch_prompts, ch_olens, chain = chat_workload(
                    max(1, a.num_requests // 5), a.seed + 4, vocab=a.vocab
                )
                bench.run(name, ch_prompts, ch_olens, ch_olens, chain=chain)
            elif run == "parity":
                pp, _ = workload(64, a.seed + 2, prompt=(16, 64), output=(32, 32), vocab=a.vocab)
                bench.run(name, pp, [32] * 64, [32] * 64, keep_tokens=True)
            else:
                print(f"unknown run {run}", flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
