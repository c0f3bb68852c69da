"""kernels_report: ratios, summaries and markdown from a synthetic timing matrix."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from proxima_bench.kernels import report as kr

# Per variant, the factor on FA3-16's time in each case (the first case / the second).
FACTORS = {
    "fa3/16/scattered": (1.0, 1.0),
    "fa3/1/scattered": (1.0, 1.21),
    "fa3/1/contiguous": (0.9, 1.0),
    "triton/16/scattered": (2.0, 2.0),
    "triton/1/scattered": (2.0, 8.0),
    "triton/1/contiguous": (1.5, 1.5),
}


def _row(shape: str, phase: str, batch: int, ctx: int, q_len: int, variant: str, ms: float) -> Any:
    kernel, page, layout = variant.split("/")
    return {
        "shape": shape,
        "phase": phase,
        "batch": batch,
        "ctx": ctx,
        "q_len": q_len,
        "kernel": kernel,
        "page": int(page),
        "layout": layout,
        "check": False,
        "ms": ms,
        "max_abs_err": 0.002,
        "ok": True,
        "error": None,
        "device": "NVIDIA H200",
    }


def _matrix() -> list[dict[str, Any]]:
    rows = []
    cases = [("decode", 32, 1024, 1, 0.5), ("decode", 512, 4096, 1, 4.0)]
    for shape in ("MHA-hd128", "GQA-4-hd64"):
        for i, (phase, batch, ctx, q_len, base) in enumerate(cases):
            for v, f in FACTORS.items():
                rows.append(_row(shape, phase, batch, ctx, q_len, v, base * f[i]))
    # One prefill case on one shape; Triton over 1-token scattered pages crashed.
    for v in kr.VARIANTS:
        rows.append(_row("MHA-hd128", "prefill", 4, 2048, 512, v, 3.0))
    rows[-2].update(ms=None, ok=False, error="RuntimeError: boom", max_abs_err=None)
    # A check case: not timed, wrong output on FA3 over 1-token pages.
    for v in kr.VARIANTS:
        row = _row("MHA-hd128", "decode", 5, 300, 1, v, 0.0)
        row.update(check=True, ms=None)
        if v == "fa3/1/scattered":
            row.update(ok=False, max_abs_err=0.5)
        rows.append(row)
    return rows


def _write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "kernels.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


def test_load_and_ratios(tmp_path: Path) -> None:
    rows = kr.load_rows(_write(tmp_path, _matrix()))
    assert len(rows) == 2 * 2 * 6 + 6 + 6
    by_case = kr.ms_by_case(rows)
    assert len(by_case) == 5  # check rows and the failed row stay out
    rat = kr.ratios(by_case[("MHA-hd128", "decode", 512, 4096, 1)])
    assert rat["triton/1/scattered"] == pytest.approx(8.0)
    assert kr.BASE not in rat
    assert kr.ratios({"triton/16/scattered": 1.0}) == {}


def test_summary_is_geomean_and_worst_case() -> None:
    sums = {(s.shape, s.phase, s.variant): s for s in kr.summarize(_matrix())}
    s = sums[("MHA-hd128", "decode", "triton/1/scattered")]
    assert s.cases == 2
    assert s.geomean == pytest.approx(4.0)  # sqrt(2 * 8)
    assert s.worst == pytest.approx(8.0) and s.worst_case == "b512 ctx4096"
    s = sums[("GQA-4-hd64", "decode", "fa3/1/scattered")]
    assert s.geomean == pytest.approx(1.1)  # sqrt(1.0 * 1.21)
    assert s.worst_case == "b512 ctx4096"
    prefill = sums[("MHA-hd128", "prefill", "triton/16/scattered")]
    assert prefill.cases == 1 and prefill.worst_case == "b4 q512 ctx2048"
    assert ("MHA-hd128", "prefill", "triton/1/scattered") not in sums  # it failed
    assert {k[:2] for k in sums} == {
        ("MHA-hd128", "decode"),
        ("GQA-4-hd64", "decode"),
        ("MHA-hd128", "prefill"),
    }


def test_summary_lines() -> None:
    lines = kr.summary_lines(_matrix())
    assert len(lines) == 3
    mha = next(x for x in lines if x.startswith("SUMMARY MHA-hd128 decode"))
    assert "(2 cases)" in mha
    assert "Triton-1 scat 4.000 (worst 8.000 @ b512 ctx4096)" in mha
    assert "FA3-1 contig 0.949" in mha  # sqrt(0.9 * 1.0)


def test_geomean_of_nothing_is_nan() -> None:
    assert math.isnan(kr.geomean([]))


def test_markdown_tables_and_failures(tmp_path: Path) -> None:
    md = kr.markdown(_matrix(), source="kernels.jsonl")
    assert "`kernels.jsonl` on NVIDIA H200" in md
    assert "### MHA-hd128, decode" in md and "### GQA-4-hd64, decode" in md
    assert "### MHA-hd128, prefill" in md
    # The 512 x 4k decode row: FA3-16 ms then each variant's ratio, in VARIANTS order.
    assert "| 512 | 4096 | 1 | 4.0000 | 1.210 | 1.000 | 2.000 | 8.000 | 1.500 |" in md
    # The failed prefill variant shows as missing in its case table.
    assert "| 4 | 2048 | 512 | 3.0000 | 1.000 | 1.000 | 1.000 | – | 1.000 |" in md
    assert "| MHA-hd128 | decode | 2 |" in md
    assert "Failures: 2" in md
    assert "- MHA-hd128 prefill b4 q512 ctx2048 triton/1/scattered: RuntimeError: boom" in md
    assert "- MHA-hd128 decode b5 ctx300 (check case) fa3/1/scattered: max abs err 0.5000" in md
    assert "without a CUDA graph" not in md
    # The numerical-check table keeps the worst error per shape and variant.
    assert "| MHA-hd128 | 0.0020 | 0.5000 | 0.0020 |" in md


def test_eager_rows_are_noted() -> None:
    rows = _matrix()
    rows[0]["graphed"] = False
    assert "1 timed rows ran without a CUDA graph" in kr.markdown(rows)


def test_main_writes_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path, _matrix())
    out = tmp_path / "kernels.md"
    kr.main([str(src), "--out", str(out)])
    assert out.read_text().startswith("## Attention kernel timing matrix")
    kr.main([str(src)])
    assert "### Summary" in capsys.readouterr().out
