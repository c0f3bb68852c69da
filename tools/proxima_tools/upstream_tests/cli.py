"""The command line, ``python -m proxima_tools.upstream_tests``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from proxima_tools.upstream_tests.common import (
    DEFAULT_SUITE,
    DEFAULT_TIMEOUT_S,
    KNOWN_FAILURES,
    MODES,
    PROFILES,
    STOCK_PYTHON,
    WORKDIR,
    log,
)
from proxima_tools.upstream_tests.prepare import prepare
from proxima_tools.upstream_tests.results import (
    KnownFailures,
    compare,
    read_junit,
    write_known_failures,
)
from proxima_tools.upstream_tests.run import run_pytest


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.upstream_tests", description=_package_doc()
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def suite_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", nargs="+", default=list(DEFAULT_SUITE), metavar="PATH")

    p_prep = sub.add_parser("prepare", help="copy the tests, write models and the map")
    suite_arg(p_prep)
    p_prep.add_argument(
        "--all", action="store_true", help="copy all of tests/, not the minimal set"
    )
    p_prep.add_argument(
        "--no-extras", action="store_true", help="do not install torchvision for the runs"
    )

    def run_args(p: argparse.ArgumentParser, default_python: str) -> None:
        p.add_argument("--profile", choices=sorted(PROFILES), default="full")
        p.add_argument("--suite", nargs="+", metavar="PATH", help="test paths instead of a profile")
        p.add_argument("--python", default=default_python, help="interpreter whose vllm is tested")
        p.add_argument(
            "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds, whole run"
        )
        p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")

    p_run = sub.add_parser("run", help="run the suite once")
    p_run.add_argument("--mode", choices=MODES, required=True)
    p_run.add_argument("--junit", type=Path, required=True)
    run_args(p_run, sys.executable)

    p_cmp = sub.add_parser("compare", help="compare a run's junit XML with the known failures")
    p_cmp.add_argument("--mode", choices=MODES, required=True)
    p_cmp.add_argument("--junit", type=Path, required=True)
    p_cmp.add_argument(
        "--against",
        type=Path,
        metavar="STOCK_JUNIT",
        help="a stock run's junit XML of the same tests, instead of the known-failures file",
    )

    p_base = sub.add_parser("baseline", help="run with stock vLLM and rewrite known_failures.txt")
    p_base.add_argument("--junit", type=Path, default=WORKDIR / "stock.xml")
    p_base.add_argument(
        "--reuse", action="store_true", help="rewrite the list from --junit without running"
    )
    run_args(p_base, str(STOCK_PYTHON))

    args = parser.parse_args(argv)
    # SIGTERM -> SystemExit, so run_pytest's cleanup stops pytest's process group.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.command == "prepare":
        prepare(args.suite, args.all, extras=not args.no_extras)
        return 0
    selection: list[str] = []
    if args.command in ("run", "baseline"):
        selection = list(args.suite or PROFILES[args.profile].pytest_args(WORKDIR))
    if args.command == "run":
        return run_pytest(
            args.mode, args.junit, args.python, selection, args.timeout, args.pytest_args
        )
    if args.command == "compare":
        if args.against is not None:
            stock = read_junit(args.against)
            if not stock.passed:
                log(f"stock run {args.against} passed nothing: it broke, no bar to compare with")
                return 2
            print(f"stock: {stock.summary()}")
            known = KnownFailures.from_stock_run(stock)
        else:
            known = KnownFailures.load()
        comparison = compare(args.mode, read_junit(args.junit), known)
        print(comparison.report())
        return 0 if comparison.ok else 1
    # baseline
    started = time.monotonic()
    if not args.reuse:
        rc = run_pytest("off", args.junit, args.python, selection, args.timeout, args.pytest_args)
        if rc not in (0, 1) or not args.junit.is_file():
            log(f"stock run broke (pytest exit {rc}); known failures left as they are")
            return 2
    results = read_junit(args.junit)
    seconds = results.seconds if args.reuse else time.monotonic() - started
    previous = KnownFailures.load() if KNOWN_FAILURES.is_file() else None
    write_known_failures(results, args.python, seconds, previous)
    print(f"stock: {results.summary()}")
    return 0
