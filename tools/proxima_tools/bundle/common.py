"""What the bundle tool shares: pins, the installer's and the lock's paths, the error type, names,
hashes and the wheel's version."""

from __future__ import annotations

import hashlib
import re
import sys
import time
import zipfile
from pathlib import Path

from proxima_tools import REPO_ROOT

UPSTREAM_VERSION = "0.26.0"


TORCH_VERSION = "2.11.0"


WHEEL_TAG = "cp38-abi3-manylinux_2_28_x86_64"


INSTALLER = Path(__file__).resolve().parent / "install_bundle.sh"  # shipped as install.sh


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
