"""The simulation report's arithmetic and layout (no vLLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxima_bench.sim.report import computed_tokens, report


def row(name: str, **kw) -> dict:
    base = {
        "name": name,
        "steps": 100,
        "finished": 10,
        "preemptions": 0,
        "recomputed_tokens": 0,
        "running_mean": 5.0,
        "prompt_tokens": 1000,
        "cached_tokens": 0,
        "output_tokens": 500,
        "capacity_slots": 4096,
        "evicted_slots": None,
        "per_step_us": 100.0,
        "prefill_tokens": 400,
    }
    return {**base, **kw}


def test_computed_tokens_are_the_measured_prefill_tokens() -> None:
    # Not prompt - cached + dropped: a resumed request may find its tokens cached.
    assert computed_tokens(row("x", cached_tokens=600, recomputed_tokens=50)) == 400


def test_report_compares_each_config_with_stock(tmp_path: Path) -> None:
    rows = [
        row("stock", steps=200, preemptions=7, recomputed_tokens=300, prefill_tokens=900),
        row(
            "proxima",
            steps=150,
            running_mean=7.5,
            cached_tokens=500,
            evicted_slots=1234,
            prefill_tokens=500,
        ),
    ]
    (tmp_path / "sysprompt-4096.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    text = report(tmp_path)
    stock_line, ours = (
        line
        for line in text.splitlines()
        if line.startswith("| stock") or line.startswith("| proxima")
    )
    assert "| 200 (1.000x) | 7 | 300 |" in stock_line
    assert "| 150 (0.750x) |" in ours
    assert "| 7.50 (1.500x) |" in ours
    assert "| 500 (50.0%) | 500 (0.556x) | 1,234 |" in ours  # 500 vs stock's 900 computed


def test_report_refuses_an_empty_result_file(tmp_path: Path) -> None:
    (tmp_path / "chat-4096.jsonl").write_text("")
    with pytest.raises(ValueError, match="no results"):
        report(tmp_path)
