"""engine_report: the tables it generates from engine_ab's raw files."""

from __future__ import annotations

import json
from pathlib import Path

from proxima_bench.engine import report as er


def _row(engine: str, cached: int, steps: int, wall: float) -> dict[str, object]:
    return {
        "engine": engine,
        "run": "sysprompt",
        "status": "ok",
        "requests": 300,
        "prefix_caching": True,
        "prompt_tokens": 1000,
        "prompt_tokens_cached": cached,
        "prompt_tokens_computed": 1000 - cached,
        "num_steps": steps,
        "wall_s": wall,
        "output_tok_per_s": 100.0,
    }


def test_prefix_and_step_rows() -> None:
    rows = [
        _row("proxima", 833, 2000, 24.0),
        {**_row("stock-fa3", 0, 0, 1.0), "prefix_caching": False},
    ]
    prefix = er.prefix_rows(rows)
    assert [r["engine"] for r in prefix] == ["proxima"]
    assert prefix[0]["hit_rate"] == "83.30%"
    steps = er.step_rows(rows)
    assert [r["engine"] for r in steps] == ["proxima"]  # no steps: no per-step time
    assert steps[0]["ms_per_step"] == 12.0


def test_main_writes_the_prefix_and_step_tables(tmp_path: Path) -> None:
    plan = tmp_path / "plan-f"
    plan.mkdir()
    rows = [_row("proxima", 566, 6040, 39.2), _row("stock-fa3", 473, 7226, 40.8)]
    (plan / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    er.main([str(tmp_path), "--min-requests", "300", "--running", "f:nothing:none"])
    text = (tmp_path / "tables.md").read_text()
    assert "## Prefix caching" in text and "| 56.60% |" in text and "| 47.30% |" in text
    assert "## Steps and time per step" in text and "| 6,040 | 6.4901 |" in text
    assert "running.png" not in text  # the steps file named does not exist: no plot
