"""The command line, ``python -m proxima_tools.upstream``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxima_tools.upstream.describe import describe_release
from proxima_tools.upstream.fetch import default_dest, fetch_artifact, verify_artifacts
from proxima_tools.upstream.lock import CACHE_ENV, LOCK_ENV, UpstreamError, load_lock


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def _names(only: Sequence[str] | None, lock: dict[str, Any]) -> list[str]:
    if not only:
        return list(lock["artifacts"])
    unknown = [n for n in only if n not in lock["artifacts"]]
    if unknown:
        raise UpstreamError(
            f"unknown artifact(s) {', '.join(unknown)}; the lock has {', '.join(lock['artifacts'])}"
        )
    return list(only)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.upstream", description=_package_doc()
    )
    parser.add_argument(
        "--lock", type=Path, help=f"lock file (default ${LOCK_ENV} or upstream.lock)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def dest_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dest", type=Path, help=f"cache folder (default ${CACHE_ENV} or .cache/upstream)"
        )

    p_fetch = sub.add_parser("fetch", help="download (or seed) and verify artifacts")
    p_fetch.add_argument("--only", nargs="+", metavar="ARTIFACT", help="subset: sdist cuda cpu")
    p_fetch.add_argument(
        "--redownload", action="store_true", help="replace a cached file whose sha256 is wrong"
    )
    p_fetch.add_argument("--offline", action="store_true", help="never use the network")
    dest_arg(p_fetch)
    p_verify = sub.add_parser("verify", help="re-hash the artifacts present in the cache")
    p_verify.add_argument("--only", nargs="+", metavar="ARTIFACT")
    dest_arg(p_verify)
    p_path = sub.add_parser("path", help="print an artifact's local path (fetching it if missing)")
    p_path.add_argument("artifact")
    p_path.add_argument("--no-fetch", action="store_true", help="fail instead of downloading")
    dest_arg(p_path)
    sub.add_parser("info", help="print the lock as JSON")
    p_describe = sub.add_parser(
        "describe", help="print [artifacts.*] tables for another release (for bumping the pin)"
    )
    p_describe.add_argument("version")
    args = parser.parse_args(argv)

    try:
        lock = load_lock(args.lock)
        if args.command == "describe":
            print(describe_release(args.version))
            return 0
        if args.command == "info":
            print(json.dumps(lock, indent=2))
            return 0
        dest = args.dest or default_dest()
        if args.command == "fetch":
            for name in _names(args.only, lock):
                path = fetch_artifact(
                    name, dest, lock=lock, redownload=args.redownload, offline=args.offline
                )
                print(path)
            return 0
        if args.command == "verify":
            problems = verify_artifacts(_names(args.only, lock), dest, lock)
            if problems:
                print(f"{len(problems)} bad file(s) in {dest}", file=sys.stderr)
                return 1
            return 0
        if args.command == "path":
            _names([args.artifact], lock)
            path = fetch_artifact(args.artifact, dest, lock=lock, offline=args.no_fetch)
            print(path)
            return 0
    except UpstreamError as exc:
        print(f"upstream.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("upstream.py: interrupted", file=sys.stderr)
        return 130
    return 2
