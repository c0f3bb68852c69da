"""``upstream.lock``: where it is, its artifacts (project, file name, sha256), the error types,
and the defaults and environment variables every part reads."""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT

DEFAULT_LOCK = REPO_ROOT / "upstream.lock"


DEFAULT_DEST = REPO_ROOT / ".cache" / "upstream"


DEFAULT_SEEDS = (REPO_ROOT / ".cache" / "dl",)


DEFAULT_INDEX = "https://pypi.org/simple"


LOCK_ENV = "PROXIMA_UPSTREAM_LOCK"


CACHE_ENV = "PROXIMA_UPSTREAM_CACHE"


SEED_ENV = "PROXIMA_UPSTREAM_SEED"


INDEX_ENV = "PROXIMA_PYPI_INDEX"


ARTIFACT_NAMES = ("sdist", "cuda", "cpu")


PEP691_ACCEPT = "application/vnd.pypi.simple.v1+json"


USER_AGENT = "proxima-vllm-upstream/1 (+proxima_tools.upstream)"


CHUNK = 1 << 20


class UpstreamError(RuntimeError):
    """A problem with the lock, the index, a download or a cached file."""


class HashMismatch(UpstreamError):
    """The sha256 of some bytes is not the one the lock (or index) expects."""


@dataclass(frozen=True)
class Artifact:
    """One pinned upstream file, as named in ``upstream.lock``."""

    name: str
    project: str
    version: str
    filename: str
    sha256: str
    size: int | None = None


def log(message: str) -> None:
    """Print a progress line on stderr (stdout is kept for machine output)."""
    print(f"[upstream] {message}", file=sys.stderr, flush=True)


def lock_path() -> Path:
    """Return the lock file in use (``PROXIMA_UPSTREAM_LOCK`` or the repo's)."""
    env = os.environ.get(LOCK_ENV)
    return Path(env) if env else DEFAULT_LOCK


def load_lock(path: Path | None = None) -> dict[str, Any]:
    """Read and sanity-check ``upstream.lock``.

    Args:
        path: Lock file; defaults to :func:`lock_path`.

    Returns:
        The parsed TOML document.

    Raises:
        UpstreamError: If the file is missing, not TOML, or lacks required keys.
    """
    path = path or lock_path()
    try:
        with path.open("rb") as fh:
            lock = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise UpstreamError(f"lock file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UpstreamError(f"{path}: not valid TOML: {exc}") from exc
    problems: list[str] = []
    if not isinstance(lock.get("upstream"), dict) or "version" not in lock["upstream"]:
        problems.append("missing [upstream] version")
    arts = lock.get("artifacts")
    if not isinstance(arts, dict) or not arts:
        problems.append("missing [artifacts.*] tables")
    else:
        for name, art in arts.items():
            for key in ("project", "filename", "sha256"):
                if not isinstance(art, dict) or not art.get(key):
                    problems.append(f"[artifacts.{name}] lacks {key!r}")
            sha = art.get("sha256", "") if isinstance(art, dict) else ""
            if sha and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
                problems.append(f"[artifacts.{name}] sha256 is not 64 lowercase hex digits")
    if problems:
        raise UpstreamError(f"{path}: " + "; ".join(problems))
    return lock


def upstream_version(lock: dict[str, Any] | None = None) -> str:
    """Return the pinned vLLM version (``[upstream] version``)."""
    lock = lock if lock is not None else load_lock()
    return str(lock["upstream"]["version"])


def get_artifact(name: str, lock: dict[str, Any] | None = None) -> Artifact:
    """Return the artifact ``name`` (``sdist``, ``cuda``, ``cpu``) from the lock.

    Raises:
        UpstreamError: If the lock has no such artifact.
    """
    lock = lock if lock is not None else load_lock()
    arts = lock["artifacts"]
    if name not in arts:
        raise UpstreamError(f"no artifact {name!r} in the lock (have: {', '.join(arts)})")
    art = arts[name]
    size = art.get("size")
    return Artifact(
        name=name,
        project=str(art["project"]),
        version=str(art.get("version", lock["upstream"]["version"])),
        filename=str(art["filename"]),
        sha256=str(art["sha256"]).lower(),
        size=int(size) if size else None,
    )
