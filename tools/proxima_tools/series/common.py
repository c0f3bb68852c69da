"""What the series tools share: default paths, identities and git options that make the round
trip deterministic, the error type, and git run with an isolated environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxima_tools import REPO_ROOT

DEFAULT_PATCHES = REPO_ROOT / "patches" / "vllm"


DEFAULT_SRC = REPO_ROOT / "build" / "vllm-src"


PATCHES_ENV = "PROXIMA_PATCHES_DIR"


UPSTREAM_SRC_ENV = "PROXIMA_UPSTREAM_SRC"


PACKAGE = "vllm"


SERIES_FILE = "series"


SUBJECT_MAX = 60


REQUIRED_TRAILERS = ("Why", "Upstreamable", "Removal", "Origin", "Forwarded", "Last-Update")


SERIES_HEADER = (
    "# Apply order of the proxima-vllm patch series against the vllm/ tree of the\n"
    "# pinned sdist (upstream.lock).  One patch file per line; '#' starts a comment.\n"
    "# Written by `python3 -m proxima_tools.series export`; see docs/patches.md.\n"
)


# Identity and date of the synthetic upstream base commit: fixed, so the base
# commit (and therefore every commit on top of it) has the same id everywhere.
BASE_IDENTITY = ("vLLM upstream", "upstream@proxima-vllm.invalid")


BASE_DATE = "2000-01-01T00:00:00+0000"


# Committer of imported patches; committer date = author date (git am option).
SERIES_IDENTITY = ("proxima-vllm series", "series@proxima-vllm.invalid")


FORMAT_PATCH_OPTIONS = (
    "--zero-commit",
    "--no-signature",
    "--keep-subject",
    "--no-numbered",
    "--full-index",
    "--no-cover-letter",
    "--no-thread",
    "--no-base",
    "--no-attach",
    "--no-renames",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--diff-algorithm=myers",
    "--unified=3",
    "--stat=72",
    "--stat-graph-width=20",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--encoding=UTF-8",
)


AM_OPTIONS = (
    "--keep",
    "--keep-cr",
    "--no-scissors",
    "--committer-date-is-author-date",
    "--whitespace=nowarn",
)


class SeriesError(RuntimeError):
    """A problem that stops a series command (the message says what to do)."""


def log(message: str) -> None:
    """Print a progress line on stderr."""
    print(f"[series] {message}", file=sys.stderr, flush=True)


_GIT_LEAKY_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)


def git_env(*, isolated: bool = True, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Return an environment for running git reproducibly.

    Args:
        isolated: Ignore the user's global and system git configuration, so
            options such as ``format.signature`` or ``diff.noprefix`` cannot
            change what is written.  Commands that create the user's own
            commits (``new``) pass False to keep the user's identity.
        extra: Variables to add.
    """
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LEAKY_VARS}
    env.update({"LC_ALL": "C", "TZ": "UTC", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"})
    if isolated:
        env.update(
            {
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_COMMITTER_NAME": SERIES_IDENTITY[0],
                "GIT_COMMITTER_EMAIL": SERIES_IDENTITY[1],
            }
        )
    if extra:
        env.update(extra)
    return env


def git(
    *args: str,
    cwd: Path,
    check: bool = True,
    isolated: bool = True,
    extra_env: dict[str, str] | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git and return its result (stdout/stderr decoded as UTF-8).

    Raises:
        SeriesError: If ``check`` and git exits non-zero (message holds git's stderr).
    """
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=git_env(isolated=isolated, extra=extra_env),
            input=stdin,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SeriesError(f"cannot run git (is it installed and on PATH?): {exc}") from exc
    result = subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )
    if check and proc.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip())[-4000:]
        raise SeriesError(
            f"git {' '.join(args[:3])} failed in {cwd} (exit {proc.returncode}):\n{detail}"
        )
    return result


def base_tag(version: str) -> str:
    """Return the tag naming the upstream base commit, e.g. ``upstream-0.26.0``."""
    return f"upstream-{version}"
