"""Make an install bundle of proxima-vllm for an air-gapped host.

A bundle is a folder with our wheel (the CPU or CUDA variant), every dependency wheel for one
target Python and platform, a pinned ``requirements.txt``, the installer (``install.sh``, a copy
of ``install_bundle.sh`` beside this module), ``bundle.env`` (what the installer checks) and
``SHA256SUMS``
over all of it. With ``--split-mb N`` the wheels travel as ``wheels.tar.part-000``, ``-001``, …
of at most N MiB each; the installer checks every part, joins them and checks the joined tar
against its own sha256 before unpacking.

How the wheel set is found: ``pip install --dry-run --report`` resolves our wheel's requirements
for the target (``--python-version``, ``--glibc``; binary wheels only; the CPU variant is
constrained by ``requirements/cpu.lock``, so the bundle holds the versions the test suite runs),
reading only the index's metadata. Then ``pip download --no-deps --require-hashes`` fetches exactly
those files (with pip's cache and config, so a TLS-intercepting proxy's CA setting works), and
their sha256 are checked against the resolution.

``--exclude-torch`` leaves out torch and its runtime (triton and the ``nvidia-*``/``cuda-*`` wheels
that torch depends on): for hosts that already have torch 2.11.0 (a GPU host's CUDA build), which
the installer then requires. torchvision/torchaudio/torchcodec (small) stay in the bundle.

Usage::

    PYTHONPATH=tools python3 -m proxima_tools.bundle --variant cpu [--exclude-torch] [--split-mb 60]
    bash BUNDLE/install.sh --venv /opt/proxima     # on the target host, no network needed

Prints the bundle folder on stdout; progress goes to stderr. Exit 1 with
``offline_bundle: error: ...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proxima_tools import REPO_ROOT

UPSTREAM_VERSION = "0.26.0"
TORCH_VERSION = "2.11.0"
WHEEL_TAG = "cp38-abi3-manylinux_2_28_x86_64"
INSTALLER = REPO_ROOT / "tools" / "proxima_tools" / "install_bundle.sh"
CPU_LOCK = REPO_ROOT / "requirements" / "cpu.lock"
CHUNK = 1 << 20

# Left out by --exclude-torch (the GPU-bundle case): torch, and those of its dependencies (followed
# through extras and markers) that are its runtime: triton and the NVIDIA/CUDA wheels. A host that
# has torch has them. nvidia-*/cuda-* wheels that only vLLM's own requirements pull in (cutlass-dsl,
# nvidia-ml-py, ...) and torch's pure-Python dependencies stay in the bundle.
TORCH_RUNTIME = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")


class BundleError(RuntimeError):
    """Anything that stops the bundle from being made; printed as ``offline_bundle: error: ...``."""


def log(msg: str) -> None:
    print(f"[offline_bundle {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def read_version(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc}") from exc


def default_wheel(variant: str, proxima_version: str) -> Path:
    label = f"proxima.{proxima_version}" + (".cpu" if variant == "cpu" else "")
    return REPO_ROOT / "dist" / f"vllm-{UPSTREAM_VERSION}+{label}-{WHEEL_TAG}.whl"


def wheel_version(wheel: Path) -> str:
    """The ``Version:`` in the wheel's METADATA (checked, not trusted from the file name)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [
                n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1
            ]
            if len(names) != 1:
                raise BundleError(
                    f"{wheel.name}: expected one .dist-info/METADATA, found {len(names)}"
                )
            text = zf.read(names[0]).decode("utf-8", "replace")
    except zipfile.BadZipFile as exc:
        raise BundleError(f"{wheel}: not a wheel ({exc})") from exc
    for line in text.splitlines():
        if line.startswith("Name:") and canonical(line.split(":", 1)[1].strip()) != "vllm":
            raise BundleError(f"{wheel.name}: distribution is not 'vllm' ({line})")
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line:
            break
    raise BundleError(f"{wheel.name}: METADATA has no Version")


def platform_args(python_version: str, glibc: str) -> list[str]:
    """pip's target options: CPython ``python_version`` on x86_64 Linux, glibc up to ``glibc``."""
    major, minor = (int(x) for x in python_version.split("."))
    gmajor, gminor = (int(x) for x in glibc.split("."))
    if gmajor != 2 or gminor < 17:
        raise BundleError(f"--glibc {glibc}: expected 2.17 or newer (2.x)")
    args = [
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        f"{major}.{minor}",
        "--abi",
        f"cp{major}{minor}",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for m in range(gminor, 4, -1):
        args += ["--platform", f"manylinux_2_{m}_x86_64"]
    args += [
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux2010_x86_64",
        "--platform",
        "manylinux1_x86_64",
    ]
    return args


@dataclass(frozen=True)
class Pinned:
    """One resolved distribution: its name, version, file URL and sha256 (from pip's report)."""

    name: str
    version: str
    url: str
    sha256: str
    requires: tuple[str, ...] = ()
    requested: bool = False  # asked for on the command line (our wheel, extras), not a dependency

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]


def resolve(
    wheel: Path,
    python_version: str,
    glibc: str,
    constraints: Path | None,
    extra: Sequence[str],
    work: Path,
) -> list[Pinned]:
    """Resolve the dependency closure of ``wheel`` (``pip install --dry-run --report``)."""
    report = work / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--target",
        str(work / "not-installed"),
        *platform_args(python_version, glibc),
    ]
    if constraints is not None:
        cmd += ["-c", str(constraints)]
    cmd += [str(wheel), *extra]
    log(
        f"resolving the dependencies of {wheel.name} for CPython {python_version}, "
        f"glibc >= {glibc}" + (f" (constraints: {constraints.name})" if constraints else "")
    )
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not report.exists():
        noise = "is ignored: it is neither a file nor a directory"
        tail = "\n".join(ln for ln in proc.stderr.splitlines() if noise not in ln)[-3000:]
        raise BundleError(
            f"pip could not resolve the requirements (exit {proc.returncode}):\n{tail}\n"
            "hint: a package without a wheel for this glibc needs a higher --glibc"
        )
    pins: list[Pinned] = []
    for item in json.loads(report.read_text())["install"]:
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        sha = hashes.get("sha256") or ""
        if not sha and info["url"].startswith("file:"):
            sha = sha256_of(Path(info["url"][len("file://") :]))
        meta = item["metadata"]
        requires = tuple(meta.get("requires_dist") or ())
        pins.append(
            Pinned(meta["name"], meta["version"], info["url"], sha, requires, item["requested"])
        )
    return pins


def torch_runtime(pins: Iterable[Pinned], python_version: str) -> set[str]:
    """Canonical names that ``--exclude-torch`` leaves out: torch, and the triton/nvidia-*/cuda-*
    distributions that only torch needs. Dependencies are followed with markers evaluated for the
    target and extras honoured. A runtime wheel that something else also needs (e.g. cuda-bindings
    for cuda-python, at a version the host's torch may not have) stays in the bundle."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip's vendored copy
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    env = {
        "python_version": python_version, "python_full_version": f"{python_version}.0",
        "platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux",
        "os_name": "posix", "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }  # fmt: skip
    pins = list(pins)
    by_name = {canonical(p.name): p for p in pins}

    def closure(roots: Iterable[str], skip: str = "") -> set[str]:
        seen: set[tuple[str, frozenset[str]]] = set()
        stack = [(r, frozenset[str]()) for r in roots]
        while stack:
            node = stack.pop()
            if node in seen or node[0] not in by_name or node[0] == skip:
                continue
            seen.add(node)
            for line in by_name[node[0]].requires:
                req = Requirement(line)
                extras = node[1] or {""}
                if req.marker is None or any(
                    req.marker.evaluate({**env, "extra": e}) for e in extras
                ):
                    stack.append((canonical(req.name), frozenset(req.extras)))
        return {name for name, _ in seen}

    if "torch" not in by_name:
        return set()
    roots = [canonical(p.name) for p in pins if p.requested and canonical(p.name) != "torch"]
    others = closure(roots, skip="torch")
    return {n for n in closure(["torch"]) if TORCH_RUNTIME.match(n) and n not in others}


def download(
    pins: Iterable[Pinned], python_version: str, glibc: str, dest: Path, work: Path
) -> None:
    """``pip download`` exactly these files (by name, version and sha256) into ``dest``."""
    pins = list(pins)
    req = work / "download.txt"
    req.write_text("".join(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in pins))
    log(f"downloading {len(pins)} wheels (pip download --no-deps --require-hashes)")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--progress-bar",
        "off",
        "--quiet",
        "-d",
        str(dest),
        *platform_args(python_version, glibc),
        "-r",
        str(req),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        noise = "is ignored: it is neither a file nor a directory"
        tail = "\n".join(ln for ln in proc.stderr.splitlines() if noise not in ln)[-3000:]
        raise BundleError(f"pip download failed (exit {proc.returncode}):\n{tail}")
    for p in pins:
        path = dest / p.filename
        if not path.is_file():
            matches = [
                f for f in dest.iterdir() if canonical(f.name.split("-")[0]) == canonical(p.name)
            ]
            raise BundleError(
                f"pip download did not produce {p.filename} (found {[m.name for m in matches]})"
            )
        got = sha256_of(path)
        if got != p.sha256:
            raise BundleError(f"{p.filename}: sha256 {got} is not the resolved {p.sha256}")


def glibc_floor(filenames: Iterable[str]) -> str:
    """The highest glibc any of the wheels needs (from its manylinux platform tags; 2.5 if none)."""
    best = (2, 5)
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for name in filenames:
        plat = name[:-4].rsplit("-", 1)[-1]
        needs = []
        for tag in plat.split("."):
            if m := re.match(r"manylinux_(\d+)_(\d+)_", tag):
                needs.append((int(m.group(1)), int(m.group(2))))
            elif (key := tag.split("_", 1)[0]) in legacy:
                needs.append(legacy[key])
        if needs:  # a file with several tags runs where the least demanding one does
            best = max(best, min(needs))
    return f"{best[0]}.{best[1]}"


def split_file(path: Path, size: int) -> list[Path]:
    """Cut ``path`` into ``path.part-000``, ``-001``, … of at most ``size`` bytes each."""
    parts: list[Path] = []
    with path.open("rb") as src:
        while True:
            part = path.with_name(f"{path.name}.part-{len(parts):03d}")
            written = 0
            with part.open("wb") as dst:
                while written < size and (block := src.read(min(CHUNK, size - written))):
                    dst.write(block)
                    written += len(block)
            if written == 0:
                part.unlink()
                break
            parts.append(part)
    path.unlink()
    return parts


def make_tar(src_dir: Path, out: Path) -> None:
    """An uncompressed, reproducible tar of ``src_dir`` (wheels are compressed already)."""

    def norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = 0
        ti.mode = 0o755 if ti.isdir() else 0o644
        return ti

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(src_dir, arcname=src_dir.name, recursive=False, filter=norm)
        for f in sorted(src_dir.iterdir()):
            tf.add(f, arcname=f"{src_dir.name}/{f.name}", filter=norm)


def write_sha256sums(bundle: Path) -> None:
    """``SHA256SUMS`` of every file in ``bundle``; replaced, never rewritten in place (a copy of a
    bundle made of hard links must not change the original)."""
    skip = ("SHA256SUMS", ".SHA256SUMS.partial")
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and p.name not in skip)
    lines = [f"{sha256_of(p)}  {p.relative_to(bundle).as_posix()}\n" for p in files]
    tmp = bundle / ".SHA256SUMS.partial"
    tmp.write_text("".join(lines))
    tmp.replace(bundle / "SHA256SUMS")


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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m proxima_tools.bundle",
        description=__doc__.split("\n\n")[0],
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


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
