"""A client-disconnect storm: hundreds of concurrent requests, some abandoned by their clients.

Each request is planned up front from a seed (:func:`make_plans`): completions (token-id prompts,
most of them behind one of a few shared prefixes, so prefix caching is exercised) or chat
completions, streaming or not, random prompt and output lengths, and how its client leaves:

* ``none``: reads the whole answer, which must then be complete;
* ``prefill``: streaming, closes the connection as soon as the response headers arrive, before
  reading any token (the request is waiting for admission or in prefill);
* ``decode``: streaming, closes after ``after_chunks`` token chunks (mid-decode);
* ``timer``: not streaming, closes after ``after_s`` seconds, wherever the request is then.

Every request asks for ``ignore_eos``, so a complete answer has exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from tests.faults.harness import SERVED, VOCAB

REQUEST_TIMEOUT_S = 180.0
WORDS = (
    "river", "stone", "cloud", "garden", "engine", "lantern", "orbit", "quiet", "harbor",
    "maple", "signal", "velvet", "copper", "meadow", "thunder", "pocket", "violet", "anchor",
    "canyon", "ember", "falcon", "glacier", "ivory", "jasmine", "kettle",
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """One request of the storm and how its client behaves."""

    index: int
    endpoint: str  # "completions" | "chat"
    stream: bool
    prompt: list[int] | str  # token ids (completions) or the user message (chat)
    max_tokens: int
    leave: str  # "none" | "prefill" | "decode" | "timer"
    after_chunks: int = 0  # decode: token chunks read before closing
    after_s: float = 0.0  # timer: seconds before closing


@dataclass
class Outcome:
    """What the client saw."""

    index: int
    leave: str
    stream: bool
    status: int = 0  # HTTP status; 0: none received
    complete: bool = False  # a whole answer: max_tokens tokens, finish_reason "length"
    left: bool = False  # the client closed before the end of the answer
    chunks: int = 0  # streaming: token chunks read
    completion_tokens: int = -1  # the server's usage figure, -1 when not seen
    finish_reason: str | None = None
    error: str | None = None


def make_plans(n: int, seed: int, max_prompt: int = 480, max_tokens: int = 96) -> list[Plan]:
    """``n`` request plans, the same for every mode given the seed."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(7, VOCAB) for _ in range(k)] for k in (37, 90, 153, 260)]
    plans = []
    for i in range(n):
        out = rng.randint(1, max_tokens)
        stream = rng.random() < 0.5
        roll = rng.random()
        if stream:
            leave = "prefill" if roll < 0.2 else "decode" if roll < 0.45 else "none"
        else:
            leave = "timer" if roll < 0.35 else "none"
        if leave == "decode" and out < 2:
            out = 2
        prompt: list[int] | str
        if rng.random() < 0.25:
            endpoint = "chat"
            prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 120)))
        else:
            endpoint = "completions"
            head = rng.choice(prefixes) if rng.random() < 0.6 else []
            tail = [rng.randrange(7, VOCAB) for _ in range(rng.randint(1, max_prompt - len(head)))]
            prompt = head + tail
        plans.append(
            Plan(
                index=i,
                endpoint=endpoint,
                stream=stream,
                prompt=prompt,
                max_tokens=out,
                leave=leave,
                after_chunks=rng.randint(1, out - 1) if leave == "decode" else 0,
                after_s=round(rng.uniform(0.0, 3.0), 3) if leave == "timer" else 0.0,
            )
        )
    return plans


def request_body(plan: Plan) -> tuple[str, dict[str, Any]]:
    """The endpoint path and JSON body of a plan."""
    body: dict[str, Any] = {
        "model": SERVED,
        "max_tokens": plan.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    if plan.stream:
        body.update(stream=True, stream_options={"include_usage": True})
    if plan.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": plan.prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = plan.prompt
    return "/v1/completions", body


def _check_final(out: Outcome, plan: Plan) -> None:
    out.complete = out.finish_reason == "length" and out.completion_tokens == plan.max_tokens


async def _stream(resp: aiohttp.ClientResponse, plan: Plan, out: Outcome) -> None:
    done = False
    async for raw in resp.content:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            out.completion_tokens = int(chunk["usage"]["completion_tokens"])
        for choice in chunk.get("choices") or []:
            out.chunks += 1
            out.finish_reason = choice.get("finish_reason") or out.finish_reason
        if plan.leave == "decode" and out.chunks >= plan.after_chunks and not done:
            out.left = True
            resp.close()
            return
    if done:
        _check_final(out, plan)


async def _whole(resp: aiohttp.ClientResponse, plan: Plan, out: Outcome) -> None:
    data = await resp.json(content_type=None)
    if resp.status == 200:
        out.finish_reason = data["choices"][0].get("finish_reason")
        out.completion_tokens = int(data["usage"]["completion_tokens"])
        _check_final(out, plan)
    else:
        out.error = json.dumps(data)[:300]


async def run_one(session: aiohttp.ClientSession, base_url: str, plan: Plan) -> Outcome:
    """Send one planned request and behave as its client."""
    path, body = request_body(plan)
    out = Outcome(plan.index, plan.leave, plan.stream)

    async def talk() -> None:
        async with session.post(base_url + path, json=body) as resp:
            out.status = resp.status
            if plan.leave == "prefill":
                out.left = True
                resp.close()
                return
            if plan.stream and resp.status == 200:
                await _stream(resp, plan, out)
            else:
                await _whole(resp, plan, out)

    try:
        if plan.leave == "timer":
            await asyncio.wait_for(talk(), plan.after_s)
        else:
            await asyncio.wait_for(talk(), REQUEST_TIMEOUT_S)
    except TimeoutError:
        if plan.leave == "timer":
            out.left = True
        else:
            out.error = "client timeout"
    except (aiohttp.ClientError, json.JSONDecodeError) as e:
        out.error = f"{type(e).__name__}: {e}"[:300]
    return out


async def run_storm(base_url: str, plans: list[Plan], concurrency: int) -> list[Outcome]:
    """All plans, at most ``concurrency`` in flight; new connection per request."""
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(force_close=True, limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def guarded(plan: Plan) -> Outcome:
            async with sem:
                return await run_one(session, base_url, plan)

        return list(await asyncio.gather(*(guarded(p) for p in plans)))


def storm(base_url: str, plans: list[Plan], concurrency: int = 48) -> list[Outcome]:
    """Run the storm from synchronous code."""
    return asyncio.run(run_storm(base_url, plans, concurrency))


def summarize(outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    """Counts by client behaviour and result, and the outcomes that broke a rule."""
    kinds = Counter(
        f"{o.leave}:{'left' if o.left else 'complete' if o.complete else 'incomplete'}"
        for o in outcomes
    )
    return {
        "requests": len(outcomes),
        "seconds": round(seconds, 1),
        "by_kind": dict(sorted(kinds.items())),
        "statuses": dict(sorted(Counter(o.status for o in outcomes).items())),
        "bad": [asdict(o) for o in outcomes if not o.left and not o.complete][:20],
    }


def timed_storm(
    base_url: str, plans: list[Plan], concurrency: int = 48
) -> tuple[list[Outcome], float]:
    """:func:`storm` and its wall time."""
    t0 = time.monotonic()
    outcomes = storm(base_url, plans, concurrency)
    return outcomes, time.monotonic() - t0
