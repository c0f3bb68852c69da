"""Run vLLM's in-process engine once, as a test fixture does, in a fresh process.

Usage: ``python run_engine.py SPEC.json OUT.json``. SPEC holds ``engine`` (EngineArgs
keyword arguments), ``requests`` (a list of ``{"prompt_token_ids": [...],
"max_tokens": N, "ignore_eos": bool}``), and optionally ``abort_after_steps``
(``{request index: step}``: abort that request once that many engine steps ran)
and ``step_limit``. OUT gets each request's output token ids, finish reason, the
preemption count and, in proxima mode, the slot pool's state after the run.

A fresh process per engine keeps vLLM's process-global state (distributed
init, compile caches, plugins) from leaking between proxima on and off.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def main(spec_path: str, out_path: str) -> None:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    from vllm_proxima.scheduling.windows import worst_pages

    with open(spec_path) as f:
        spec: dict[str, Any] = json.load(f)
    t0 = time.perf_counter()
    engine = LLMEngine.from_engine_args(EngineArgs(**spec["engine"]))
    init_s = time.perf_counter() - t0
    scheduler = engine.engine_core.engine_core.scheduler

    preemptions = {"n": 0}
    original_preempt = scheduler._preempt_request

    def counting_preempt(request: Any, *args: Any, **kwargs: Any) -> Any:
        preemptions["n"] += 1
        return original_preempt(request, *args, **kwargs)

    scheduler._preempt_request = counting_preempt

    drafts = {"steps": 0, "tokens": 0}
    original_schedule = scheduler.schedule

    # Proxima's projected-peak admission: the most pages a running request held beyond the
    # final size the projection gives it (pages of its first KV group; > 0: under-counted).
    over = {"pages": None}

    def final_overrun() -> None:
        view = getattr(scheduler, "residency_view", None)
        shape = getattr(view, "shape", None)
        coordinator = getattr(scheduler.kv_cache_manager, "coordinator", None)
        # upstream's pages (the paged layout), one full-attention group: the token layout
        # has its own manager, and a sliding-window group holds no final size
        if view is None or shape is None or coordinator is None or shape.windows or shape.full != 1:
            return
        managers = coordinator.single_type_managers
        if not managers:  # the token layout's stand-in coordinator (vLLM 0.32+) has no groups
            return
        blocks = managers[0].req_to_blocks
        for r in scheduler.running:
            final = min(r.num_prompt_tokens + r.max_tokens, view.max_model_len)
            worst = worst_pages(final + view.lookahead_tokens, view.page_size, None)
            excess = len(blocks.get(r.request_id, ())) - worst
            over["pages"] = excess if over["pages"] is None else max(over["pages"], excess)

    def counting_schedule(*args: Any, **kwargs: Any) -> Any:
        out = original_schedule(*args, **kwargs)
        spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
        if spec:
            drafts["steps"] += 1
            drafts["tokens"] += sum(len(t) for t in spec.values())
        final_overrun()
        return out

    scheduler.schedule = counting_schedule

    aborts = {int(k): int(v) for k, v in spec.get("abort_after_steps", {}).items()}
    outputs: dict[str, dict[str, Any]] = {}
    requests = spec["requests"]
    prompts: dict[str, list[int]] = {}

    def submit(rid: str, prompt: list[int], max_tokens: int) -> None:
        params = SamplingParams(
            temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False
        )
        prompts[rid] = prompt
        engine.add_request(rid, {"prompt_token_ids": prompt}, params)

    # Follow-ups (chat turns): {"parent": i, "suffix": [...], "max_tokens": n} starts
    # when request i finishes, with prompt = i's prompt + i's output + suffix.
    followups = spec.get("followups", [])

    def submit_followups(parent: str, output: list[int]) -> None:
        for j, f in enumerate(followups):
            if str(f["parent"]) == parent:
                rid = f"f{j}"
                submit(rid, prompts[parent] + output + f["suffix"], f["max_tokens"])

    for i, req in enumerate(requests):
        if req.get("start", True):
            submit(str(i), req["prompt_token_ids"], req["max_tokens"])

    steps = 0
    step_limit = spec.get("step_limit", 100_000)
    max_running = 0
    while engine.has_unfinished_requests() and steps < step_limit:
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = {
                    "token_ids": list(out.outputs[0].token_ids),
                    "finish_reason": out.outputs[0].finish_reason,
                    "num_cached_tokens": out.num_cached_tokens,
                }
                submit_followups(out.request_id, list(out.outputs[0].token_ids))
        steps += 1
        max_running = max(max_running, len(scheduler.running))
        due = [str(i) for i, s in aborts.items() if s == steps]
        if due:
            engine.abort_request(due)
            for rid in due:
                outputs.setdefault(rid, {"token_ids": None, "finish_reason": "aborted"})

    result: dict[str, Any] = {
        "outputs": outputs,
        "steps": steps,
        "preemptions": preemptions["n"],
        "max_running": max_running,
        "init_s": round(init_s, 2),
        "unfinished": engine.has_unfinished_requests(),
        "scheduler_cls": type(scheduler).__name__,
        "block_size": engine.vllm_config.cache_config.block_size,
        # Speculative decoding: the draft slots the scheduler reserves per request, and the
        # lookahead proxima's projection counts (None: no projection, e.g. stock).
        "draft_tokens_scheduled": drafts["tokens"],
        "final_overrun_pages": over["pages"],
        "kv_cache_specs": [
            type(g.kv_cache_spec).__name__ for g in scheduler.kv_cache_config.kv_cache_groups
        ],
        # proxima: whether the projected-peak admission runs (None: left to vLLM's)
        "projection": (
            None
            if not hasattr(scheduler, "residency_view")
            else scheduler.residency_view is not None
        ),
        "num_lookahead_tokens": int(getattr(scheduler, "num_lookahead_tokens", 0) or 0),
        "projected_lookahead": getattr(
            getattr(scheduler, "residency_view", None), "lookahead_tokens", None
        ),
    }
    manager = scheduler.kv_cache_manager
    pool = getattr(manager, "pool", None)
    result["cached_tokens_total"] = sum(o.get("num_cached_tokens") or 0 for o in outputs.values())
    result["prompt_tokens_total"] = sum(len(p) for p in prompts.values())
    if pool is not None:
        pool.check_invariants()
        cache = getattr(manager, "cache", None)
        result["prefix_cache"] = None
        if cache is not None:
            cache.check_invariants()
            st = cache.stats()
            result["prefix_cache"] = {"cached": st.cached, "hits": st.hits, "queries": st.queries}
            manager.reset_prefix_cache()  # refcounts must drop to zero once cleared
        result["pool"] = {
            "num_usable": int(pool.num_usable),
            "num_free": int(pool.num_free),
            "num_used": int(pool.num_used),
            "requests_holding_slots": len(manager.req_slots),
        }
    else:
        # Upstream's block pool (stock, or proxima's paged layout): pages, not slots.
        blocks = manager.block_pool
        holding = manager.coordinator.single_type_managers[0].req_to_blocks
        result["pool"] = {
            "page_size": engine.vllm_config.cache_config.block_size,
            "num_usable": int(blocks.num_gpu_blocks - 1),
            "num_free": int(blocks.get_num_free_blocks()),
            "num_used": int(blocks.num_gpu_blocks - 1 - blocks.get_num_free_blocks()),
            "requests_holding_slots": sum(1 for b in holding.values() if b),
        }
        result["usage"] = manager.usage
    with open(out_path, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # skip slow engine teardown


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
