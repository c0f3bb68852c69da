"""Which wheels a bundle needs: pip's resolution for the target Python and platform, torch's own
runtime wheels (left out with ``--exclude-torch``), and their download."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proxima_tools.bundle.common import TORCH_RUNTIME, BundleError, canonical, log, sha256_of


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
