"""One bundle: wheel, dependencies, requirements.txt, installer, bundle.env, README, checksums."""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

from proxima_tools.bundle.common import (
    CHUNK,
    CPU_LOCK,
    INSTALLER,
    TORCH_VERSION,
    BundleError,
    canonical,
    default_wheel,
    log,
    read_version,
    sha256_of,
    wheel_version,
)
from proxima_tools.bundle.files import glibc_floor, make_tar, split_file, write_sha256sums
from proxima_tools.bundle.resolve import download, resolve, torch_runtime


def build(args: argparse.Namespace) -> Path:
    t0 = time.monotonic()
    proxima_version = args.proxima_version or read_version(Path(args.version_file))
    wheel = Path(args.wheel) if args.wheel else default_wheel(args.variant, proxima_version)
    if not wheel.is_file():
        raise BundleError(
            f"{wheel} not found: run `python3 -m proxima_tools.wheels --variant {args.variant}`"
        )
    version = wheel_version(wheel)
    if (args.variant == "cpu") != version.endswith(".cpu"):
        raise BundleError(f"{wheel.name} is version {version}: not a {args.variant} wheel")
    if not INSTALLER.is_file():
        raise BundleError(f"{INSTALLER} missing")
    py = args.python_version
    if not re.fullmatch(r"3\.\d+", py):
        raise BundleError(f"--python-version {py}: expected 3.N")
    if not (10 <= int(py.split(".")[1]) <= 14):
        raise BundleError(f"--python-version {py}: vLLM 0.26.0 supports Python 3.10-3.14")
    constraints = None
    if args.constraints != "none":
        constraints = (
            Path(args.constraints)
            if args.constraints
            else (CPU_LOCK if args.variant == "cpu" else None)
        )
        if constraints is not None and not constraints.is_file():
            raise BundleError(f"constraints file {constraints} not found")

    name = (
        f"proxima-vllm-{proxima_version}-{args.variant}"
        f"{'-notorch' if args.exclude_torch else ''}-cp{py.replace('.', '')}-x86_64"
    )
    out_dir = Path(args.out)
    bundle = out_dir / name
    if bundle.exists():
        if not args.force:
            raise BundleError(f"{bundle} exists (use --force to replace it)")
        shutil.rmtree(bundle)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))
    try:
        with tempfile.TemporaryDirectory(prefix="offline-bundle-") as tmp:
            work = Path(tmp)
            pins = resolve(wheel, py, args.glibc, constraints, args.extra, work)
            ours = [p for p in pins if canonical(p.name) == "vllm"]
            if len(ours) != 1 or ours[0].version != version:
                raise BundleError(f"the resolution did not pick {wheel.name} ({ours})")
            deps = [p for p in pins if canonical(p.name) != "vllm"]
            runtime = torch_runtime(pins, py) if args.exclude_torch else set()
            excluded = sorted(p.name for p in deps if canonical(p.name) in runtime)
            deps = [p for p in deps if p.name not in excluded]
            if args.exclude_torch:
                log(
                    f"left out for a host with torch {TORCH_VERSION}: "
                    f"{', '.join(excluded) or 'nothing'}"
                )
            wheels = staging / "wheels"
            wheels.mkdir()
            download(deps, py, args.glibc, wheels, work)
            shutil.copy2(wheel, wheels / wheel.name)

        files = sorted(f.name for f in wheels.iterdir())
        total = sum(f.stat().st_size for f in wheels.iterdir())
        floor = glibc_floor(files)
        reqs = [f"vllm=={version}\n"] + [
            f"{p.name}=={p.version}\n" for p in sorted(deps, key=lambda p: canonical(p.name))
        ]
        (staging / "requirements.txt").write_text(
            f"# proxima-vllm {proxima_version} ({args.variant}): all wheels here, pinned\n"
            + "".join(reqs)
        )
        shutil.copy2(INSTALLER, staging / "install.sh")
        (staging / "install.sh").chmod(0o755)
        payload_sha = ""
        parts: list[Path] = []
        if args.split_mb:
            tar = staging / "wheels.tar"
            log(
                f"packing {len(files)} wheels into wheels.tar and cutting it into parts of "
                f"{args.split_mb} MiB"
            )
            make_tar(wheels, tar)
            payload_sha = sha256_of(tar)
            shutil.rmtree(wheels)
            parts = split_file(tar, args.split_mb * CHUNK)
        env = {
            "BUNDLE_FORMAT": "1",
            "PROXIMA_VERSION": proxima_version,
            "VARIANT": args.variant,
            "VLLM_VERSION": version,
            "WHEEL": wheel.name,
            "PYTHON_VERSION": py,
            "GLIBC_MIN": floor,
            "EXCLUDE_TORCH": "1" if args.exclude_torch else "0",
            "TORCH_VERSION": TORCH_VERSION,
            "EXCLUDED": " ".join(excluded),
            "WHEEL_COUNT": str(len(files)),
            "PAYLOAD": "wheels.tar" if parts else "",
            "PAYLOAD_SHA256": payload_sha,
            "PARTS": " ".join(p.name for p in parts),
        }
        (staging / "bundle.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        (staging / "README.txt").write_text(
            README.format(
                name=name,
                version=version,
                py=py,
                glibc=floor,
                variant=args.variant,
                torch_note=(
                    f"It has NO torch: the target environment must have torch {TORCH_VERSION} "
                    f"({'CUDA 13.0 build' if args.variant == 'cuda' else 'any build'}).\n"
                    if args.exclude_torch
                    else ""
                ),
            )
        )
        write_sha256sums(staging)
        staging.chmod(0o755)  # mkdtemp made it 0700
        staging.rename(bundle)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    log(
        f"bundle {bundle}: {len(files)} wheels ({total / 1e6:.0f} MB), {len(parts) or 'no'} parts, "
        f"{size / 1e6:.0f} MB in all, needs CPython {py} and glibc >= {floor}; "
        f"{time.monotonic() - t0:.0f} s"
    )
    return bundle


README = """\
{name}: proxima-vllm (vllm {version}) and every dependency as wheels, for an offline install.

Target: Linux x86_64, CPython {py}, glibc >= {glibc}; {variant} variant.
{torch_note}
Install (no network needed):

    bash install.sh --venv /opt/proxima-vllm            # makes the venv with python{py} if missing
    /opt/proxima-vllm/bin/vllm serve MODEL_DIR ...

install.sh checks SHA256SUMS (and joins wheels.tar.part-* if the bundle is split) before it installs
anything, then runs pip install --no-index --find-links. Options: bash install.sh --help
"""
