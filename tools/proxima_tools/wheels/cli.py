"""The command line, ``python -m proxima_tools.wheels``: arguments, lock check, SHA256SUMS."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

from proxima_tools.wheels.build import BuildInputs, Built, build_variant
from proxima_tools.wheels.common import (
    DEFAULT_BASE_REF,
    DEFAULT_OUT,
    DEFAULT_PACKAGE,
    DEFAULT_TREE,
    DEFAULT_VERSION_FILE,
    PLUGIN_ENTRY,
    SHA256SUMS,
    UPSTREAM_CACHE_ENV,
    UPSTREAM_DIRS,
    UPSTREAM_WHEELS,
    VARIANTS,
    BuildError,
    log,
)
from proxima_tools.wheels.metadata import pyproject_entry_points, read_proxima_version
from proxima_tools.wheels.overlay import check_package_version, collect_package, load_overlay
from proxima_tools.wheels.zipwriter import CHUNK


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def update_sha256sums(out_dir: Path, built: Sequence[Built]) -> Path:
    """Write ``SHA256SUMS``: lines for what was built, plus older lines whose file still exists."""
    path = out_dir / SHA256SUMS
    sums: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            digest, _, name = line.partition("  ")
            if name and (out_dir / name).is_file():
                sums[name] = digest
    for b in built:
        sums[b.path.name] = b.sha256
    path.write_text("".join(f"{sums[n]}  {n}\n" for n in sorted(sums)))
    return path


def check_lock(lock: Path, wheel: Path) -> None:
    """Verify ``wheel``'s sha256 against any ``filename``/``sha256`` entry in ``lock``."""
    with lock.open("rb") as fh:
        data = tomllib.load(fh)
    want = next(
        (t.get("sha256") for t in _tables(data) if t.get("filename") == wheel.name),
        None,
    )
    if not want:
        log(f"warning: {lock} names no sha256 for {wheel.name}; not checked")
        return
    digest = hashlib.sha256()
    with wheel.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != want:
        raise BuildError(f"{wheel} sha256 {digest.hexdigest()} != {want} from {lock}")
    log(f"{wheel.name}: sha256 matches {lock.name}")


def _tables(node: object) -> Iterator[dict[str, object]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _tables(value)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m proxima_tools.wheels",
        description=_package_doc(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--variant", choices=["cpu", "cuda", "all"], required=True)
    p.add_argument(
        "--patched-tree",
        type=Path,
        default=DEFAULT_TREE,
        help="git work tree with the series as commits (default: %(default)s)",
    )
    p.add_argument(
        "--base-ref",
        default=DEFAULT_BASE_REF,
        help="the series' base in the tree (default: %(default)s)",
    )
    where = "$PROXIMA_UPSTREAM_CACHE, .cache/upstream/ or .cache/dl/"
    p.add_argument(
        "--cpu-wheel",
        type=Path,
        default=None,
        help=f"upstream's CPU wheel (default: {UPSTREAM_WHEELS['cpu']} in {where})",
    )
    p.add_argument(
        "--cuda-wheel",
        type=Path,
        default=None,
        help=f"upstream's CUDA wheel (default: {UPSTREAM_WHEELS['cuda']} in {where})",
    )
    p.add_argument(
        "--package",
        type=Path,
        default=DEFAULT_PACKAGE,
        help="the vllm_proxima package folder (default: %(default)s)",
    )
    p.add_argument(
        "--pyproject",
        type=Path,
        default=None,
        help="pyproject.toml whose [project.entry-points] are added too "
        "(default: <package>/../../pyproject.toml if it exists)",
    )
    p.add_argument(
        "--no-pyproject",
        action="store_true",
        help="add only the proxima vllm.general_plugins entry point",
    )
    p.add_argument("--version-file", type=Path, default=DEFAULT_VERSION_FILE)
    p.add_argument("--proxima-version", default=None, help="overrides --version-file")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--verify",
        choices=["full", "new", "none"],
        default="full",
        help="hash every member against RECORD (full, default), only the members "
        "this tool wrote (new), or skip validation (none)",
    )
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="check the upstream wheels' sha256 against this lock file (e.g. upstream.lock)",
    )
    return p.parse_args(argv)


def default_upstream_wheel(variant: str) -> Path:
    """The first of $PROXIMA_UPSTREAM_CACHE, .cache/upstream, .cache/dl holding the wheel."""
    env = os.environ.get(UPSTREAM_CACHE_ENV)
    folders = [Path(env)] if env else []
    candidates = [d / UPSTREAM_WHEELS[variant] for d in (*folders, *UPSTREAM_DIRS)]
    return next((c for c in candidates if c.is_file()), candidates[0])


def _pyproject(args: argparse.Namespace) -> Path | None:
    """--pyproject, else vllm-proxima/pyproject.toml next to the package's src/ folder."""
    if args.no_pyproject:
        return None
    chosen: Path | None = args.pyproject
    return chosen or Path(args.package).resolve().parent.parent / "pyproject.toml"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        proxima_version = read_proxima_version(args.proxima_version, args.version_file)
        package_files = collect_package(args.package.resolve())
        check_package_version(package_files, proxima_version)
        extra = (PLUGIN_ENTRY, *pyproject_entry_points(_pyproject(args)))
        overlay = load_overlay(args.patched_tree.resolve(), args.base_ref)
        names = ["cpu", "cuda"] if args.variant == "all" else [args.variant]
        given = {"cpu": args.cpu_wheel, "cuda": args.cuda_wheel}
        wheels = {v: given[v] or default_upstream_wheel(v) for v in names}
        built: list[Built] = []
        for name in names:
            if args.lock:
                check_lock(args.lock, wheels[name])
            inputs = BuildInputs(VARIANTS[name], overlay, package_files, extra, proxima_version)
            built.append(build_variant(wheels[name], inputs, args.out.resolve(), args.verify))
        sums = update_sha256sums(args.out.resolve(), built)
    except (BuildError, OSError) as exc:
        print(f"proxima_tools.wheels: error: {exc}", file=sys.stderr)
        return 1
    log(f"updated {sums}")
    for b in built:
        log(f"{b.path.name}: {b.size / 1e6:.1f} MB, sha256 {b.sha256}, {b.seconds:.1f}s")
        print(b.path)
    return 0
