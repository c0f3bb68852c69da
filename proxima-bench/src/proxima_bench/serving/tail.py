"""How a run ended: when its requests finished, and what the last ones waited.

A point whose requests all start at once (a burst, the long-output point) is measured over its
makespan: output tok/s is the output over the time the *last* request took. One request that
waited long for KV can move that by several per cent (h100-lease3-2026-12-07: proxima's first
preemption victim finished 2.9 s after the 63rd request, on top of a rate ~1 % under stock's
before the tail). The tail and the rate before it say how much of a gap is the whole run's and
how much a few requests'. It is read from ``vllm bench serve``'s detailed result
(``--save-detailed``): each request's start, TTFT and inter-token latencies. A gap between two
tokens over :data:`STALL_S` is a stall: the request waited (preempted, or held behind a
prefill).
"""

from __future__ import annotations

from typing import Any

import numpy as np

STALL_S = 0.2
"""An inter-token gap this long (seconds) counts as a stall: a decode step takes ~5-50 ms."""
LAST = 3
"""The last requests described one by one."""


def run_tail(result: dict[str, Any], last: int = LAST) -> dict[str, Any] | None:
    """The end of one run from vLLM's saved result, or ``None`` without per-request data.

    Returns ``end_s`` (the finish times' P50, P90 and max, in seconds from the first
    request's start), ``last_gap_s`` (the last finish after the one before it) and ``last``:
    the last ``last`` requests to finish, latest first, each with its dataset ``index``,
    ``input`` and ``output`` tokens, ``end_s``, and ``stalled_s`` over ``stalls`` stalls.
    ``until_p90_tok_s`` is the output tok/s up to the P90 finish: the run's rate before its
    tail, which one late request does not move. Failed requests (no TTFT) are left out.
    """
    starts = result.get("start_times") or []
    ttfts = result.get("ttfts") or []
    itls = result.get("itls") or []
    if not starts or len(ttfts) != len(starts) or len(itls) != len(starts):
        return None
    inputs = result.get("input_lens") or [None] * len(starts)
    outputs = result.get("output_lens") or [None] * len(starts)
    t0 = min(starts)
    done: list[dict[str, Any]] = []
    token_times: list[float] = []
    for i, (start, ttft, gaps) in enumerate(zip(starts, ttfts, itls, strict=True)):
        if not ttft or gaps is None:
            continue
        t = start - t0 + ttft
        token_times.append(t)
        for gap in gaps:
            t += gap
            token_times.append(t)
        stalls = [g for g in gaps if g > STALL_S]
        done.append(
            {
                "index": i,
                "input": inputs[i],
                "output": outputs[i],
                "end_s": round(start - t0 + ttft + sum(gaps), 3),
                "stalled_s": round(sum(stalls), 3),
                "stalls": len(stalls),
            }
        )
    if not done:
        return None
    done.sort(key=lambda r: r["end_s"])
    ends = [r["end_s"] for r in done]
    p50, p90 = (round(float(q), 3) for q in np.percentile(ends, (50, 90)))
    until_p90 = sum(1 for t in token_times if t <= p90 + 5e-4)  # end_s is rounded to 1 ms
    return {
        "requests": len(done),
        "end_s": {
            "p50": p50,
            "p90": p90,
            "max": ends[-1],
        },
        "until_p90_tok_s": round(until_p90 / p90, 1) if p90 > 0 else None,
        "last_gap_s": round(ends[-1] - ends[-2], 3) if len(ends) > 1 else 0.0,
        "last": done[::-1][:last],
    }
