"""Fuzzed request bodies from the OpenAPI schema (schemathesis), replayed on two servers.

Cases are generated once, from the stock server's ``/openapi.json``, with a fixed Hypothesis seed:
half from the schema (positive: valid by the schema, often not by the server) and half against it
(negative: wrong types, missing fields, non-JSON bodies). Two of every three JSON object bodies get
``"model": "tiny"`` (and completions without a prompt ``"prompt": "fuzz"``), so that they reach the
engine instead of a 404 or the missing-prompt 400. Each case becomes one plain
request (method, URL path, headers, body bytes), sent unchanged to every server.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import requests

from tests.faults.harness import SERVED

ENDPOINTS = ("/v1/completions", "/v1/chat/completions")
DEFAULT_CASES = 150
SEED = 20261203
CALL_TIMEOUT_S = 120.0


def num_cases() -> int:
    """Cases per endpoint: ``PROXIMA_FUZZ_CASES`` or :data:`DEFAULT_CASES`."""
    return int(os.environ.get("PROXIMA_FUZZ_CASES", DEFAULT_CASES))


@dataclass(frozen=True)
class Call:
    """One fuzzed request, as bytes on the wire (the server's address aside)."""

    path: str
    index: int
    mode: str  # schemathesis' generation mode: "positive" | "negative"
    headers: dict[str, str]
    body: bytes

    def preview(self, limit: int = 300) -> str:
        return self.body[:limit].decode(errors="replace")


def _to_call(case: Any, path: str, index: int, mode: str) -> Call:
    kwargs = case.as_transport_kwargs(base_url="http://fuzz")
    headers = {str(k): str(v) for k, v in kwargs.get("headers", {}).items()}
    headers.pop("X-Schemathesis-TestCaseId", None)  # random per run; keeps bodies comparable
    if "json" in kwargs:
        body = kwargs["json"]
        if isinstance(body, dict) and index % 3:
            body = _reachable(body, path)
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    else:
        raw = kwargs.get("data", b"")
        data = raw if isinstance(raw, bytes) else str(raw).encode()
    return Call(path, index, mode, headers, data)


def _reachable(body: dict[str, Any], path: str) -> dict[str, Any]:
    """The body with the served model, and a prompt where a completion has none, so that the
    case gets past the model check and the one-line prompt check to the engine's input path."""
    body = {**body, "model": SERVED}
    if path == "/v1/completions" and not {"prompt", "prompt_embeds"} & body.keys():
        body["prompt"] = "fuzz"
    return body


def generate(schema: dict[str, Any], path: str, n: int, seed: int = SEED) -> list[Call]:
    """``n`` calls of ``POST path``, alternating positive and negative cases, deterministic."""
    import schemathesis
    from schemathesis import GenerationMode

    operation = schemathesis.openapi.from_dict(schema)[path]["POST"]
    calls: list[Call] = []
    for mode, count in ((GenerationMode.POSITIVE, (n + 1) // 2), (GenerationMode.NEGATIVE, n // 2)):
        cases = _draw(operation.as_strategy(mode), count, seed)
        calls.extend(_to_call(c, path, len(calls) + i, mode.value) for i, c in enumerate(cases))
    return calls


def _draw(strategy: Any, count: int, seed: int) -> list[Any]:
    """The first ``count`` examples Hypothesis draws from ``strategy`` with ``seed``."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    cases: list[Any] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def collect(case: Any) -> None:
        cases.append(case)

    collect()
    return cases[:count]


def send(base_url: str, call: Call) -> str:
    """The response's status code as text, or ``timeout`` / ``error:<type>``."""
    try:
        r = requests.post(
            base_url + call.path, data=call.body, headers=call.headers, timeout=CALL_TIMEOUT_S
        )
        return str(r.status_code)
    except requests.Timeout:
        return "timeout"
    except requests.RequestException as e:
        return f"error:{type(e).__name__}"


def replay(base_url: str, calls: list[Call], workers: int = 8) -> list[str]:
    """Statuses of ``calls`` against one server, in order."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: send(base_url, c), calls))


def _server_error(status: str) -> bool:
    """A 5xx, a timeout or a failed connection."""
    return status.startswith("5") or not status.isdigit()


def compare(
    calls: list[Call], statuses: dict[str, list[str]], stock: str, proxima: str
) -> dict[str, Any]:
    """Status histograms per mode and endpoint, every case whose statuses differ, and every
    case that got a 5xx (or no answer) from either server."""
    hist: dict[str, dict[str, dict[str, int]]] = {}
    for mode, got in statuses.items():
        per_path: dict[str, Counter[str]] = {}
        for call, status in zip(calls, got, strict=True):
            per_path.setdefault(call.path, Counter())[status] += 1
        hist[mode] = {p: dict(sorted(c.items())) for p, c in per_path.items()}
    rows = [
        {
            "path": call.path,
            "index": call.index,
            "generation": call.mode,
            stock: a,
            proxima: b,
            "body": call.preview(),
        }
        for call, a, b in zip(calls, statuses[stock], statuses[proxima], strict=True)
    ]
    mismatches = [r for r in rows if r[stock] != r[proxima]]
    return {
        "cases": dict(Counter(c.path for c in calls)),
        "seed": SEED,
        "status_codes": hist,
        "mismatches": mismatches,
        "server_errors": [r for r in rows if _server_error(r[stock]) or _server_error(r[proxima])],
        "proxima_5xx_where_stock_4xx": [
            m for m in mismatches if m[proxima].startswith("5") and m[stock].startswith("4")
        ],
    }
