"""Fuzzed /v1/completions and /v1/chat/completions bodies: proxima answers exactly as stock does.

The same cases (``fuzz.py``: schemathesis over the stock server's ``/openapi.json``, fixed seed,
``PROXIMA_FUZZ_CASES`` per endpoint, default 150) go to a ``--proxima off`` server and a default
(paged) proxima server. Every case must get the same status code from both, so in particular
never a 5xx from proxima where stock answers 4xx. The summary (cases, status codes per mode and
endpoint, mismatches) is written to ``fuzz-summary.json`` in the test's tmp dir and printed.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.faults.conftest import ServerPool
from tests.faults.fuzz import ENDPOINTS, compare, generate, num_cases, replay

pytestmark = [pytest.mark.server, pytest.mark.faults]


def openapi(base_url: str) -> dict:
    with urllib.request.urlopen(base_url + "/openapi.json", timeout=30) as r:
        return json.loads(r.read())


def test_fuzzed_bodies_get_stock_status_codes(servers: ServerPool, tmp_path: Path) -> None:
    pytest.importorskip("schemathesis")
    stock, proxima = servers.get("off"), servers.get("paged")
    schema = openapi(stock.base_url)
    assert openapi(proxima.base_url) == schema, "proxima changed the OpenAPI schema"

    t0 = time.monotonic()
    calls = [call for path in ENDPOINTS for call in generate(schema, path, num_cases())]
    t1 = time.monotonic()
    statuses = {"off": replay(stock.base_url, calls), "paged": replay(proxima.base_url, calls)}
    summary = compare(calls, statuses, "off", "paged")
    summary["seconds"] = {"generate": round(t1 - t0, 1), "replay": round(time.monotonic() - t1, 1)}
    out = tmp_path / "fuzz-summary.json"
    out.write_text(json.dumps(summary, indent=1))
    print(f"fuzz summary ({out}):\n{json.dumps(summary, indent=1)}")

    assert all(n == num_cases() for n in summary["cases"].values()), summary["cases"]
    assert not summary["proxima_5xx_where_stock_4xx"]
    assert not summary["mismatches"], f"{len(summary['mismatches'])} status codes differ"
