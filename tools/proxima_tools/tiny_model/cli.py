"""The command line, ``python -m proxima_tools.tiny_model``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from proxima_tools.tiny_model.build import _sha256, is_complete, make_tiny_model
from proxima_tools.tiny_model.measure import measure_logits
from proxima_tools.tiny_model.recipe import ALL_FILES, RECIPE, RECIPE_VERSION


def _human_size(n_bytes: int) -> str:
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.tiny_model",
        description=(
            "Build the tiny seeded Llama (HF format) that proxima-vllm uses as its default model."
        ),
    )
    parser.add_argument("--out", type=Path, default=Path("models/tiny-llama"), help="output folder")
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if a complete build exists"
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="afterwards greedy-decode random prompts with transformers (needs torch) and "
        "report logit peakiness and continuation variety",
    )
    parser.add_argument("--prompts", type=int, default=50, help="number of prompts for --measure")
    args = parser.parse_args(argv)

    out: Path = args.out
    start = time.perf_counter()
    reused = out.exists() and not args.force and is_complete(out)
    try:
        make_tiny_model(out, force=args.force)
    except (OSError, RuntimeError, ImportError) as exc:
        print(f"tiny_model: error: {exc}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    verb = "reused existing" if reused else "built"
    print(f"{verb} {RECIPE} v{RECIPE_VERSION} at {out} in {elapsed:.2f}s")
    for name in ALL_FILES:
        path = out / name
        print(f"  {name:28s} {_human_size(path.stat().st_size):>10s}  sha256 {_sha256(path)[:16]}")
    if args.measure:
        start = time.perf_counter()
        try:
            stats = measure_logits(out, n_prompts=args.prompts)
        except ImportError as exc:
            print(
                f"tiny_model: error: --measure needs torch and transformers: {exc}",
                file=sys.stderr,
            )
            return 1
        print(f"measured in {time.perf_counter() - start:.1f}s:")
        for key, value in dataclasses.asdict(stats).items():
            shown = f"{value:.4f}" if isinstance(value, float) else repr(value)
            print(f"  {key:20s} {shown}")
    return 0
