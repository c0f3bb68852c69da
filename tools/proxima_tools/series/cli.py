"""The command line, ``python -m proxima_tools.series``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

from proxima_tools import upstream
from proxima_tools.series.apply import ChangedFile, apply_to_target, changed_files, wheel_notes
from proxima_tools.series.check import check_series
from proxima_tools.series.common import (
    DEFAULT_SRC,
    PATCHES_ENV,
    REQUIRED_TRAILERS,
    SERIES_FILE,
    UPSTREAM_SRC_ENV,
    SeriesError,
    base_tag,
    log,
)
from proxima_tools.series.export import export_series, new_patch
from proxima_tools.series.seriesfile import patches_dir_default, read_series
from proxima_tools.series.tree import import_series, resolve_upstream_source


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def _iter_paths(files: dict[str, ChangedFile], with_status: bool) -> Iterator[str]:
    for path, entry in files.items():
        if with_status:
            old = f" (from {entry.old_path})" if entry.old_path else ""
            yield f"{entry.status} {path}{old}"
        else:
            yield path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.series", description=_package_doc()
    )
    parser.add_argument(
        "--patches-dir", type=Path, help=f"patch folder (default ${PATCHES_ENV} or patches/vllm)"
    )
    parser.add_argument("--lock", type=Path, help="lock file (default upstream.lock)")
    parser.add_argument(
        "--upstream",
        type=Path,
        help=f"sdist tarball or folder with vllm/ (default: ${UPSTREAM_SRC_ENV}, else the lock)",
    )
    parser.add_argument("--offline", action="store_true", help="never download the sdist")
    sub = parser.add_subparsers(dest="command", required=True)

    p_import = sub.add_parser(
        "import", help="make a git work tree: upstream base + one commit per patch"
    )
    p_import.add_argument(
        "--dest", type=Path, default=DEFAULT_SRC, help="work tree (default build/vllm-src)"
    )
    p_import.add_argument(
        "--force", action="store_true", help="replace dest even if it holds unexported work"
    )
    p_import.add_argument(
        "--base-only", action="store_true", help="stop after the upstream base commit"
    )
    p_export = sub.add_parser(
        "export", help="write the work tree's commits back to the patch folder"
    )
    p_export.add_argument(
        "--src", type=Path, default=DEFAULT_SRC, help="work tree (default build/vllm-src)"
    )
    sub.add_parser("check", help="verify the series (files, trailers, byte-identical round trip)")
    p_new = sub.add_parser("new", help="commit the staged changes of the work tree as a new patch")
    p_new.add_argument("subject", help="commit subject; the patch file name derives from it")
    p_new.add_argument("--src", type=Path, default=DEFAULT_SRC)
    p_new.add_argument("-a", "--all", action="store_true", help="stage all changes first")
    for key in REQUIRED_TRAILERS:
        p_new.add_argument(
            f"--{key.lower()}",
            dest=key.replace("-", "_").lower(),
            metavar="TEXT",
            help=f"{key}: trailer",
        )
    p_changed = sub.add_parser("changed-files", help="list the files the series changes")
    p_changed.add_argument(
        "--json", action="store_true", help="JSON with status and patches per file"
    )
    p_changed.add_argument("--status", action="store_true", help="prefix each path with A/M/D/R")
    p_apply = sub.add_parser(
        "apply", help="apply the series to a folder holding vllm/ (e.g. an unpacked wheel)"
    )
    p_apply.add_argument("--target", type=Path, required=True)
    p_apply.add_argument("--check", action="store_true", help="only check that it applies")
    args = parser.parse_args(argv)

    patches_dir: Path = (args.patches_dir or patches_dir_default()).resolve()
    try:
        lock = upstream.load_lock(args.lock)
        version = upstream.upstream_version(lock)
        if args.command == "import":
            source = resolve_upstream_source(args.upstream, lock=lock, offline=args.offline)
            import_series(
                args.dest.resolve(),
                patches_dir=patches_dir,
                source=source,
                version=version,
                force=args.force,
                apply_patches=not args.base_only,
            )
        elif args.command == "export":
            export_series(args.src.resolve(), patches_dir, base_tag(version))
        elif args.command == "check":
            started = time.monotonic()
            source = resolve_upstream_source(args.upstream, lock=lock, offline=args.offline)
            problems = check_series(patches_dir, source=source, version=version)
            if problems:
                print(
                    f"series check FAILED ({len(problems)} problem(s)) for {patches_dir}:",
                    file=sys.stderr,
                )
                for problem in problems:
                    print(f"  - {problem}", file=sys.stderr)
                return 1
            for note in wheel_notes(patches_dir, lock):
                log(f"note: {note}")
            count = len(read_series(patches_dir / SERIES_FILE).entries)
            elapsed = time.monotonic() - started
            log(f"series check ok: {count} patch(es), round trip byte-identical ({elapsed:.1f} s)")
        elif args.command == "new":
            trailers = {k: getattr(args, k.replace("-", "_").lower()) for k in REQUIRED_TRAILERS}
            name = new_patch(
                args.src.resolve(),
                args.subject,
                {k: v for k, v in trailers.items() if v},
                stage_all=args.all,
            )
            log(f"committed; `python3 -m proxima_tools.series export` will write it as {name}")
        elif args.command == "changed-files":
            files = changed_files(patches_dir)
            if args.json:
                print(json.dumps({k: asdict(v) for k, v in files.items()}, indent=2))
            else:
                for line in _iter_paths(files, args.status):
                    print(line)
        elif args.command == "apply":
            apply_to_target(patches_dir, args.target.resolve(), check_only=args.check)
    except (SeriesError, upstream.UpstreamError) as exc:
        print(f"series.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("series.py: interrupted", file=sys.stderr)
        return 130
    return 0
