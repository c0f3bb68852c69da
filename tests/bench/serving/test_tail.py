"""How a run ended (:mod:`proxima_bench.serving.tail`) and its table in the matrix report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

try:
    import proxima_bench  # noqa: F401
except ImportError:  # plain checkout without the dev overlay on PYTHONPATH
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proxima-bench" / "src"))

from proxima_bench.serving import matrix_report as mr
from proxima_bench.serving.tail import STALL_S, run_tail


def result(*requests: tuple[float, float, list[float]]) -> dict[str, Any]:
    """A ``vllm bench serve`` detailed result: (start, TTFT, inter-token gaps) per request."""
    return {
        "start_times": [r[0] for r in requests],
        "ttfts": [r[1] for r in requests],
        "itls": [r[2] for r in requests],
        "input_lens": [10 * (i + 1) for i in range(len(requests))],
        "output_lens": [len(r[2]) + 1 for r in requests],
    }


def test_the_last_request_and_its_stalls() -> None:
    # Four requests from t=100: #2 waits 5 s mid-stream (a preemption) and ends last.
    tail = run_tail(
        result(
            (100.0, 0.5, [0.1] * 10),  # ends 1.5
            (100.0, 0.5, [0.1] * 20),  # ends 2.5
            (100.0, 0.5, [0.1] * 5 + [5.0] + [0.1] * 5),  # ends 6.5, stalled 5 s
            (101.0, 0.5, [0.1] * 30 + [STALL_S]),  # ends 4.7: a gap of exactly STALL_S is not one
        )
    )
    assert tail is not None
    assert tail["requests"] == 4
    assert tail["end_s"]["max"] == pytest.approx(6.5)
    assert tail["last_gap_s"] == pytest.approx(1.8)  # after #3's 4.7
    last = tail["last"]
    assert [r["index"] for r in last] == [2, 3, 1]  # latest first
    assert last[0] == {
        "index": 2,
        "input": 30,
        "output": 12,
        "end_s": pytest.approx(6.5),
        "stalled_s": pytest.approx(5.0),
        "stalls": 1,
    }
    assert last[1]["stalls"] == 0
    # P50 between the 2nd and 3rd of 1.5, 2.5, 4.7, 6.5; P90 70 % of the way from 4.7 to 6.5
    assert tail["end_s"]["p50"] == pytest.approx(3.6)
    assert tail["end_s"]["p90"] == pytest.approx(5.96)
    # tokens out by 5.96 s: all of #0 (11), #1 (21) and #3 (32), #2's 6 before its wait
    assert tail["until_p90_tok_s"] == pytest.approx(round(70 / 5.96, 1))


def test_failed_requests_are_left_out_and_no_data_gives_none() -> None:
    tail = run_tail(result((0.0, 0.2, [0.1, 0.1]), (0.0, 0.0, [])))  # the second failed
    assert tail is not None and tail["requests"] == 1 and tail["last_gap_s"] == 0.0
    assert run_tail({"start_times": [0.0], "ttfts": [0.1]}) is None  # no --save-detailed
    assert run_tail({}) is None
    assert run_tail(result((0.0, 0.0, []))) is None  # every request failed


def test_report_shows_how_the_runs_ended(tmp_path: Path) -> None:
    def run(tok_s: float, tail: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "metrics": {"output_throughput": tok_s, "completed": 4},
            "counters": {"preemptions": 0, "proxima": {}},
            "checks": {"all_completed": True},
            "error": None,
            "tail": tail,
        }

    slow = run_tail(result((0.0, 0.5, [0.1] * 10), (0.0, 0.5, [0.1] * 5 + [5.0] + [0.1] * 5)))
    even = run_tail(result((0.0, 0.5, [0.1] * 10), (0.0, 0.5, [0.1] * 12)))
    raw = {
        "schema": "proxima-matrix/1",
        "config": {"model": "/m/llama-2-7b", "modes": ["stock", "proxima"]},
        "runs": [
            {
                "point": "longout-c64",
                "repeat": 0,
                "modes": {"stock": run(100.0, even), "proxima": run(95.0, slow)},
                "ratios": {"proxima": 0.95},
                "ratio": 0.95,
            },
            {  # a run recorded before tails were kept
                "point": "mix-c32",
                "repeat": 0,
                "modes": {"stock": run(100.0, None), "proxima": run(100.0, None)},
                "ratios": {"proxima": 1.0},
                "ratio": 1.0,
            },
        ],
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "raw.json").write_text(json.dumps(raw))
    text = mr.write_report([tmp_path / "a"], plots=False).read_text()
    assert "### How the runs ended" in text
    # the rate before the tail: stock 23 tokens by 1.68 s; proxima 18 by 6.0 s (#1's wait)
    assert "| longout-c64 | stock | 1.7 (+0.2; #1 20/13, stalled 0.0 s), 13.7 |" in text
    assert "| longout-c64 | proxima | 6.5 (+5.0; #1 20/12, stalled 5.0 s), 3.0 |" in text
    assert "| mix-c32 | stock |" not in text.split("### How the runs ended")[1]
    # no tails at all: no section
    for entry in raw["runs"]:
        for m in entry["modes"].values():
            m["tail"] = None
    (tmp_path / "a" / "raw.json").write_text(json.dumps(raw))
    assert "How the runs ended" not in mr.write_report([tmp_path / "a"], plots=False).read_text()
