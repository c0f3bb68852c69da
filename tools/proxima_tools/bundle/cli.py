"""The command line, ``python -m proxima_tools.bundle``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from proxima_tools import REPO_ROOT
from proxima_tools.bundle.build import build
from proxima_tools.bundle.common import TORCH_VERSION, BundleError


def _package_doc() -> str:
    """The first paragraph of the package's docstring (its __init__ is loaded by now)."""
    return (sys.modules[__package__].__doc__ or "").split("\n\n")[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m proxima_tools.bundle",
        description=_package_doc(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--variant", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--wheel", help="our wheel (default: dist/ by VERSION and variant)")
    ap.add_argument(
        "--out", default=str(REPO_ROOT / "dist" / "bundles"), help="parent folder of the bundle"
    )
    ap.add_argument(
        "--python-version",
        default=f"{sys.version_info.major}.{sys.version_info.minor}",
        help="target CPython X.Y (default: this interpreter's)",
    )
    ap.add_argument(
        "--glibc",
        default="2.35",
        help="newest glibc whose wheels may be used (default 2.35: Ubuntu 22.04; Debian 12 has "
        "2.36, RHEL 9 2.34); the bundle records the floor it actually needs",
    )
    ap.add_argument(
        "--exclude-torch",
        action="store_true",
        help="leave out torch and its runtime (triton, the nvidia-*/cuda-* wheels torch needs): "
        "for hosts that already have torch " + TORCH_VERSION,
    )
    ap.add_argument(
        "--split-mb",
        type=int,
        default=0,
        metavar="N",
        help="ship the wheels as a tar cut into parts of at most N MiB",
    )
    ap.add_argument(
        "--constraints",
        default="",
        help="pip constraints file (default: requirements/cpu.lock for cpu, none for cuda; "
        "'none' for none)",
    )
    ap.add_argument("--proxima-version", help="default: the VERSION file")
    ap.add_argument("--version-file", default=str(REPO_ROOT / "VERSION"))
    ap.add_argument("--force", action="store_true", help="replace an existing bundle")
    ap.add_argument("extra", nargs="*", help="more requirements to bundle (e.g. a plugin)")
    args = ap.parse_args(argv)
    if args.split_mb < 0:
        ap.error("--split-mb must be positive")
    try:
        print(build(args))
    except BundleError as exc:
        print(f"offline_bundle: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
