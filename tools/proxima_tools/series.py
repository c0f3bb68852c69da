"""Manage the vLLM patch series in ``patches/vllm/`` (quilt/Electron style).

The series is a list of ``git format-patch`` files applied, in the order given
by ``patches/vllm/series``, on top of the ``vllm/`` tree of the pinned sdist.
Patches are edited as commits in a git work tree (``build/vllm-src``) and
exported back; the exported files are deterministic, so ``check`` can prove
that ``patches/vllm/`` is exactly what an import/export round trip produces.

Commands::

    python3 -m proxima_tools.series import [--dest build/vllm-src] [--force]
    python3 -m proxima_tools.series export [--src build/vllm-src]
    python3 -m proxima_tools.series check
    python3 -m proxima_tools.series new "Subject" [--src build/vllm-src] [--why ...]
    python3 -m proxima_tools.series changed-files [--json]
    python3 -m proxima_tools.series apply --target DIR [--check]

Environment:
    PROXIMA_PATCHES_DIR   patch folder (default ``patches/vllm``)
    PROXIMA_UPSTREAM_SRC  upstream source: an sdist tarball or a folder holding
                          ``vllm/`` (default: the locked sdist, via tools/proxima_tools/upstream.py)
    PROXIMA_UPSTREAM_LOCK lock file (default ``upstream.lock``)
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import email.header
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from proxima_tools import REPO_ROOT, upstream

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


# -------------------------------------------------------------------------- git


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


# ----------------------------------------------------------------------- series


@dataclass
class Series:
    """A parsed ``series`` file, keeping comments so rewrites preserve them."""

    header: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    lines: dict[str, str] = field(default_factory=dict)
    comments: dict[str, list[str]] = field(default_factory=dict)
    trailing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_series(path: Path) -> Series:
    """Parse a series file; a missing file is an empty series.

    Lines are patch file names; ``#`` starts a comment (whole-line or after
    whitespace).  Comment lines right above an entry stay attached to it; the
    header is everything up to the last blank line before the first entry.
    """
    series = Series()
    if not path.exists():
        return series
    pending: list[str] = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        name = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not name:
            pending.append(raw)
            continue
        if not series.entries:
            # Header: up to the last blank line before the first entry; the
            # comment block right above the first entry belongs to it.
            blanks = [i for i, line in enumerate(pending) if not line.strip()]
            cut = blanks[-1] + 1 if blanks else len(pending)
            series.header, pending = pending[:cut], pending[cut:]
        if "/" in name or not name.endswith(".patch") or " " in name:
            series.problems.append(
                f"{path.name}:{lineno}: {name!r} is not a plain '*.patch' file name"
            )
            continue
        if name in series.lines:
            series.problems.append(f"{path.name}:{lineno}: {name} is listed twice")
            continue
        series.entries.append(name)
        series.lines[name] = raw
        series.comments[name], pending = pending, []
    if series.entries:
        series.trailing = pending
    else:
        series.header = pending
    return series


def render_series(names: Sequence[str], old: Series) -> str:
    """Return the text of a series listing ``names``, keeping ``old``'s comments."""
    out: list[str] = []
    header = old.header if any(line.strip() for line in old.header) else SERIES_HEADER.splitlines()
    out.extend(header)
    for name in names:
        out.extend(old.comments.get(name, []))
        out.append(old.lines.get(name, name))
    out.extend(old.trailing)
    return "\n".join(out) + "\n"


def patch_name(subject: str) -> str:
    """Return the file name for a commit subject.

    Lowercase, every run of non-alphanumerics becomes ``_``, at most 60
    characters, ``.patch`` appended; never numbered.

    >>> patch_name("[Core] Token-granular KV cache: allocator hook")
    'core_token_granular_kv_cache_allocator_hook.patch'
    """
    slug = re.sub(r"[^a-z0-9]+", "_", subject.lower()).strip("_")
    slug = slug[:SUBJECT_MAX].rstrip("_") or "patch"
    return f"{slug}.patch"


def patches_dir_default() -> Path:
    """Return the patch folder (``PROXIMA_PATCHES_DIR`` or ``patches/vllm``)."""
    env = os.environ.get(PATCHES_ENV)
    return Path(env) if env else DEFAULT_PATCHES


# ---------------------------------------------------------------- patch parsing


@dataclass
class FileChange:
    """One file touched by a patch: status A/M/D, path and (for renames) old path."""

    status: str
    path: str
    old_path: str | None = None


@dataclass
class PatchInfo:
    """What ``check`` and ``changed-files`` need to know about a patch file."""

    name: str
    subject: str
    author: str
    date: str
    message: str
    trailers: dict[str, str]
    problems: list[str]
    changes: list[FileChange]


_TRAILER_RE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
_UPSTREAMABLE_RE = re.compile(r"(?i)(yes|no|partly|partially)\b")


def parse_trailers(message: str) -> tuple[dict[str, str], list[str]]:
    """Extract the required DEP-3-like trailers from a commit message.

    A trailer is ``Key: value`` at the start of a line; its value continues on
    following non-blank lines that do not start another ``Key:``.  Keys are
    matched case-insensitively.

    Returns:
        The trailers found (canonical key -> value) and problems (missing,
        empty, TODO placeholders, malformed values, duplicates).
    """
    wanted = {k.lower(): k for k in REQUIRED_TRAILERS}
    found: dict[str, str] = {}
    problems: list[str] = []
    current: str | None = None
    for line in message.splitlines():
        match = _TRAILER_RE.match(line)
        if match and match.group(1).lower() in wanted:
            current = wanted[match.group(1).lower()]
            if current in found:
                problems.append(f"trailer {current}: appears more than once")
            found[current] = match.group(2).strip()
        elif match or not line.strip():
            current = None
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    for key in REQUIRED_TRAILERS:
        value = found.get(key)
        if value is None:
            problems.append(f"missing trailer {key}:")
        elif not value:
            problems.append(f"trailer {key}: is empty")
        elif value.upper().startswith("TODO"):
            problems.append(f"trailer {key}: is still a TODO placeholder")
    upstreamable = found.get("Upstreamable", "")
    if (
        upstreamable
        and not _UPSTREAMABLE_RE.match(upstreamable)
        and not upstreamable.upper().startswith("TODO")
    ):
        problems.append("trailer Upstreamable: must start with 'yes', 'no' or 'partly' (then why)")
    last = found.get("Last-Update", "")
    if last and not last.upper().startswith("TODO"):
        try:
            dt.date.fromisoformat(last)
        except ValueError:
            problems.append(f"trailer Last-Update: {last!r} is not a YYYY-MM-DD date")
    return found, problems


def _decode_header(value: str) -> str:
    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except (ValueError, LookupError):
        return value


def _unquote_path(path: str) -> str:
    """Undo git's C-style quoting of a path (``"a/sp\\303\\251cial"``)."""
    if not (path.startswith('"') and path.endswith('"')):
        return path
    body = path[1:-1]
    out = bytearray()
    i = 0
    escapes = {"n": 10, "t": 9, '"': 34, "\\": 92, "a": 7, "b": 8, "f": 12, "r": 13, "v": 11}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(escapes.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(ch.encode("utf-8"))
        i += 1
    return out.decode("utf-8", "replace")


def _strip_prefix(path: str) -> str | None:
    path = _unquote_path(path.split("\t")[0].rstrip())
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_changes(diff_text: str) -> list[FileChange]:
    """List the files a (format-patch) diff touches, from its headers only."""
    changes: list[FileChange] = []
    block: list[str] | None = None

    def finish(lines: list[str]) -> None:
        first = lines[0][len("diff --git ") :]
        old = new = None
        status = "M"
        rename_from = rename_to = None
        for line in lines[1:]:
            if line.startswith("new file mode"):
                status = "A"
            elif line.startswith("deleted file mode"):
                status = "D"
            elif line.startswith(("rename from ", "copy from ")):
                rename_from = _unquote_path(line.split(" ", 2)[2])
            elif line.startswith(("rename to ", "copy to ")):
                rename_to = _unquote_path(line.split(" ", 2)[2])
            elif line.startswith("--- "):
                old = _strip_prefix(line[4:])
            elif line.startswith("+++ "):
                new = _strip_prefix(line[4:])
        if rename_from and rename_to:
            changes.append(FileChange("R", rename_to, rename_from))
            return
        path = new or old
        if path is None:  # binary or mode-only change: names come from the diff line
            size = (len(first) - 5) // 2
            candidate = first[2 : 2 + size]
            if first == f"a/{candidate} b/{candidate}":
                path = candidate
            else:
                parts = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', first)
                path = _strip_prefix(parts[-1]) or ""
        changes.append(FileChange(status, path))

    for line in diff_text.splitlines():
        if line.startswith("diff --git "):
            if block:
                finish(block)
            block = [line]
        elif block is not None:
            if line.startswith("@@") or line.startswith("GIT binary patch"):
                finish(block)
                block = None
            else:
                block.append(line)
    if block:
        finish(block)
    return changes


def parse_patch(path: Path) -> PatchInfo:
    """Parse a ``git format-patch`` file: headers, message, trailers, files."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    headers: dict[str, str] = {}
    i = 0
    if lines and lines[0].startswith("From "):
        i = 1
    last_key: str | None = None
    while i < len(lines) and lines[i].strip():
        line = lines[i]
        if line[:1] in (" ", "\t") and last_key:
            headers[last_key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            last_key = key.strip().lower()
            headers[last_key] = value.strip()
        i += 1
    body: list[str] = []
    for line in lines[i + 1 :]:
        if line == "---" or line.startswith("diff --git "):
            break
        body.append(line)
    diff_start = text.find("\ndiff --git ")
    diff_text = text[diff_start + 1 :] if diff_start >= 0 else ""
    subject = _decode_header(headers.get("subject", ""))
    message = "\n".join(body).strip("\n")
    trailers, problems = parse_trailers(message)
    if not subject:
        problems.insert(0, "no Subject: header (is this a git format-patch file?)")
    changes = parse_changes(diff_text)
    if not changes:
        problems.append("contains no diff")
    return PatchInfo(
        name=path.name,
        subject=subject,
        author=_decode_header(headers.get("from", "")),
        date=headers.get("date", ""),
        message=message,
        trailers=trailers,
        problems=problems,
        changes=changes,
    )


# ------------------------------------------------------------- upstream source


def resolve_upstream_source(
    spec: Path | None = None, *, lock: dict[str, Any] | None = None, offline: bool = False
) -> Path:
    """Return the upstream source: an sdist tarball or a folder holding ``vllm/``.

    Order: ``spec``, then ``PROXIMA_UPSTREAM_SRC``, then the locked sdist
    (fetched and verified through tools/proxima_tools/upstream.py).
    """
    if spec is None and os.environ.get(UPSTREAM_SRC_ENV):
        spec = Path(os.environ[UPSTREAM_SRC_ENV])
    if spec is not None:
        if not spec.exists():
            raise SeriesError(f"upstream source {spec} does not exist")
        return spec
    try:
        return upstream.fetch_artifact("sdist", lock=lock, offline=offline)
    except upstream.UpstreamError as exc:
        raise SeriesError(f"cannot get the upstream sdist: {exc}") from exc


def _safe_relpath(name: str) -> PurePosixPath | None:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    return rel


def _skip(rel: PurePosixPath) -> bool:
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def populate_tree(source: Path, worktree: Path) -> int:
    """Write the ``vllm/`` package of ``source`` into ``worktree/vllm``.

    ``source`` is an sdist tarball (``<top>/vllm/...``) or a folder containing
    ``vllm/``.  File modes are normalised to 0644/0755 so the resulting git tree
    only depends on contents and executable bits.  ``__pycache__`` is skipped.

    Returns:
        The number of files written.
    """
    count = 0
    if source.is_dir():
        pkg = source / PACKAGE
        if not pkg.is_dir():
            raise SeriesError(f"{source} has no {PACKAGE}/ folder")
        for root, dirs, files in os.walk(pkg):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            root_path = Path(root)
            for fname in sorted(files):
                src = root_path / fname
                rel = PurePosixPath(src.relative_to(source).as_posix())
                if _skip(rel):
                    continue
                dst = worktree / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                else:
                    shutil.copyfile(src, dst)
                    os.chmod(dst, 0o755 if os.stat(src).st_mode & stat.S_IXUSR else 0o644)
                count += 1
        return count
    if not tarfile.is_tarfile(source):
        raise SeriesError(f"{source} is neither a folder holding {PACKAGE}/ nor a tarball")
    with tarfile.open(source) as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if len(parts) < 3 or parts[1] != PACKAGE:
                continue
            safe = _safe_relpath("/".join(parts[1:]))
            if safe is None:
                raise SeriesError(f"{source}: unsafe member path {member.name!r}")
            rel = safe
            if _skip(rel):
                continue
            dst = worktree / rel
            if member.isdir():
                dst.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                dst.parent.mkdir(parents=True, exist_ok=True)
                fh = tar.extractfile(member)
                assert fh is not None
                with fh, dst.open("wb") as out:
                    shutil.copyfileobj(fh, out, 1 << 20)
                os.chmod(dst, 0o755 if member.mode & stat.S_IXUSR else 0o644)
                count += 1
            elif member.issym():
                target = PurePosixPath(rel.parent, member.linkname)
                if (
                    PurePosixPath(member.linkname).is_absolute()
                    or ".." in PurePosixPath(os.path.normpath(str(target))).parts
                ):
                    raise SeriesError(f"{source}: symlink {member.name} points outside the tree")
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(member.linkname, dst)
                count += 1
            else:
                log(f"warning: skipping {member.name} (not a file, folder or symlink)")
    if count == 0:
        raise SeriesError(f"{source} has no {PACKAGE}/ files under its top folder")
    return count


def commit_all(worktree: Path, message: str, *, identity: tuple[str, str], date: str) -> str:
    """Stage everything (ignored files included) and commit with a fixed identity and date.

    Returns:
        The new commit id.
    """
    git("add", "--all", "--force", ".", cwd=worktree)
    name, mail = identity
    env = {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": mail,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": mail,
        "GIT_COMMITTER_DATE": date,
    }
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "--allow-empty",
        "-m",
        message,
        cwd=worktree,
        extra_env=env,
    )
    return git("rev-parse", "HEAD", cwd=worktree).stdout.strip()


# ------------------------------------------------------------------------ import


def listed_patches(patches_dir: Path) -> list[Path]:
    """Return the patch files of the series in apply order.

    Raises:
        SeriesError: If the series file is malformed or lists a missing file.
    """
    series = read_series(patches_dir / SERIES_FILE)
    if series.problems:
        raise SeriesError("bad series file:\n  " + "\n  ".join(series.problems))
    missing = [n for n in series.entries if not (patches_dir / n).is_file()]
    if missing:
        raise SeriesError(f"series lists missing file(s) in {patches_dir}: {', '.join(missing)}")
    return [patches_dir / n for n in series.entries]


def _unexported_work(dest: Path, patches_dir: Path, tag: str) -> list[str]:
    """Describe work in an import tree that ``patches_dir`` does not hold."""
    status = git("status", "--porcelain", "--untracked-files=all", cwd=dest).stdout.strip()
    if status:
        lines = status.splitlines()
        more = f" (+{len(lines) - 10} more)" if len(lines) > 10 else ""
        return ["uncommitted changes:\n    " + "\n    ".join(lines[:10]) + more]
    if (
        git(
            "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", cwd=dest, check=False
        ).returncode
        != 0
    ):
        return [f"it has no tag {tag} (not made by `series.py import` for this pin)"]
    with tempfile.TemporaryDirectory(prefix="series-export-") as tmp:
        names = export_series(dest, Path(tmp), tag, quiet=True)
        return [
            f"commit not in {patches_dir}: {name}"
            for name in names
            if not (patches_dir / name).is_file()
            or (patches_dir / name).read_bytes() != (Path(tmp) / name).read_bytes()
        ]


def import_series(
    dest: Path,
    *,
    patches_dir: Path,
    source: Path,
    version: str,
    force: bool = False,
    apply_patches: bool = True,
) -> list[str]:
    """Create a git work tree at ``dest``: upstream base commit plus one commit per patch.

    Args:
        dest: Work tree to create (replaced if it exists and holds no unexported work).
        patches_dir: Folder with ``series`` and the patch files.
        source: Upstream sdist tarball or folder holding ``vllm/``.
        version: Upstream version, used for the tag ``upstream-<version>``.
        force: Replace ``dest`` even if it has uncommitted or unexported work.
        apply_patches: False stops after the base commit.

    Returns:
        The names of the patches applied, in order.

    Raises:
        SeriesError: If ``dest`` holds work that would be lost, or a patch fails.
    """
    tag = base_tag(version)
    patches = listed_patches(patches_dir) if apply_patches else []
    if dest.exists() and any(dest.iterdir()):
        if not force:
            if not (dest / ".git").exists():
                raise SeriesError(
                    f"{dest} exists and is not a git work tree; remove it or pass --force"
                )
            lost = _unexported_work(dest, patches_dir, tag)
            if lost:
                raise SeriesError(
                    f"{dest} holds work that is not in {patches_dir}; "
                    "run `proxima_tools.series export` first, or pass --force to discard it:\n  "
                    + "\n  ".join(lost)
                )
        log(f"removing the old work tree {dest}")
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    git("init", "--quiet", "--initial-branch=main", ".", cwd=dest)
    log(f"importing {PACKAGE}/ from {source}")
    count = populate_tree(source, dest)
    base = commit_all(
        dest,
        f"vLLM {version} upstream ({PACKAGE}/ package)\n\n"
        "Base of the proxima-vllm patch series, imported by scripts/series.py.\n",
        identity=BASE_IDENTITY,
        date=BASE_DATE,
    )
    git("tag", tag, cwd=dest)
    elapsed = time.monotonic() - started
    log(f"base commit {base[:12]} ({count} files) tagged {tag} in {elapsed:.1f} s")
    applied: list[str] = []
    for patch in patches:
        result = git("am", *AM_OPTIONS, str(patch.resolve()), cwd=dest, check=False)
        if result.returncode != 0:
            git("am", "--abort", cwd=dest, check=False)
            detail = (result.stdout + result.stderr).strip()
            raise SeriesError(
                f"patch {patch.name} does not apply on top of {tag}"
                + (f" + {', '.join(applied)}" if applied else "")
                + f":\n{detail}"
            )
        applied.append(patch.name)
        log(f"applied {patch.name}")
    elapsed = time.monotonic() - started
    log(f"{len(applied)} patch(es) applied; work tree ready at {dest} ({elapsed:.1f} s)")
    return applied


# ------------------------------------------------------------------------ export


def export_series(src: Path, patches_dir: Path, tag: str, *, quiet: bool = False) -> list[str]:
    """Write ``tag..HEAD`` of ``src`` as patch files into ``patches_dir``.

    Files are named after commit subjects, ``series`` is rewritten (keeping its
    comments) and ``*.patch`` files no longer in the series are deleted.  The
    output depends only on the commits, so exporting twice gives identical bytes.

    Returns:
        The patch names in order.

    Raises:
        SeriesError: Missing tag, merges, empty commits or clashing names.
    """
    if not (src / ".git").exists():
        raise SeriesError(f"{src} is not a git work tree; run `proxima_tools.series import` first")
    if (
        git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", cwd=src, check=False).returncode
        != 0
    ):
        raise SeriesError(f"{src} has no tag {tag}; was it imported for another upstream version?")
    if git("merge-base", "--is-ancestor", tag, "HEAD", cwd=src, check=False).returncode != 0:
        raise SeriesError(f"HEAD of {src} does not descend from {tag}")
    if git("rev-list", "--merges", f"{tag}..HEAD", cwd=src).stdout.strip():
        raise SeriesError(f"{tag}..HEAD contains merge commits; rebase to a linear history first")
    commits = git("rev-list", "--reverse", f"{tag}..HEAD", cwd=src).stdout.split()
    subjects = git("log", "--reverse", "-z", "--format=%s", f"{tag}..HEAD", cwd=src).stdout.split(
        "\0"
    )
    subjects = [s for s in subjects if s]
    if len(subjects) != len(commits):
        raise SeriesError("could not read the commit subjects")
    names = [patch_name(s) for s in subjects]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise SeriesError(
            f"several commits map to the same patch name: {', '.join(clashes)}; "
            "reword their subjects"
        )
    for commit, subject in zip(commits, subjects, strict=True):
        if git("diff", "--quiet", f"{commit}^", commit, cwd=src, check=False).returncode == 0:
            raise SeriesError(f"commit {commit[:12]} ({subject!r}) changes nothing; drop it")
    if not quiet and git("status", "--porcelain", "--untracked-files=no", cwd=src).stdout.strip():
        log(f"warning: {src} has uncommitted changes; they are NOT exported (commit them first)")
    patches_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="series-fp-") as tmp:
        if commits:
            git(
                "format-patch",
                *FORMAT_PATCH_OPTIONS,
                "--numbered-files",
                "-o",
                tmp,
                f"{tag}..HEAD",
                cwd=src,
            )
        produced = sorted(Path(tmp).iterdir(), key=lambda p: int(p.name))
        if len(produced) != len(commits):
            raise SeriesError(
                f"git format-patch wrote {len(produced)} files for {len(commits)} commits"
            )
        for name, subject, produced_file in zip(names, subjects, produced, strict=True):
            data = produced_file.read_bytes()
            target = patches_dir / name
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
                if not quiet:
                    log(f"wrote {name}")
            if not quiet:
                problems = parse_patch(target).problems
                if problems:
                    log(f"warning: {name} ({subject}): " + "; ".join(problems))
    series_path = patches_dir / SERIES_FILE
    text = render_series(names, read_series(series_path))
    if not series_path.exists() or series_path.read_text(encoding="utf-8") != text:
        series_path.write_text(text, encoding="utf-8")
    for stale in sorted(patches_dir.glob("*.patch")):
        if stale.name not in names:
            stale.unlink()
            if not quiet:
                log(f"deleted {stale.name} (no longer in the series)")
    if not quiet:
        log(f"exported {len(names)} patch(es) to {patches_dir}")
    return names


# ------------------------------------------------------------------------- check


def _file_diff(expected: Path, actual: Path, label: str, limit: int = 60) -> str:
    old = (
        expected.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        if expected.exists()
        else []
    )
    new = (
        actual.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        if actual.exists()
        else []
    )
    diff = list(
        difflib.unified_diff(old, new, f"a/{label} (committed)", f"b/{label} (re-exported)")
    )
    more = f"... ({len(diff) - limit} more diff lines)\n" if len(diff) > limit else ""
    return "".join(diff[:limit]) + more


def check_series(
    patches_dir: Path, *, source: Path | None, version: str, round_trip: bool = True
) -> list[str]:
    """Check the series; return a list of problems (empty means all good).

    Checks: the series file parses; every listed file exists and every
    ``*.patch`` is listed; every patch has the required trailers; and an
    import/export round trip reproduces ``patches_dir`` byte for byte.
    """
    problems: list[str] = []
    series = read_series(patches_dir / SERIES_FILE)
    if not (patches_dir / SERIES_FILE).exists():
        problems.append(
            f"{patches_dir / SERIES_FILE} does not exist (an empty series still needs the file)"
        )
    problems.extend(series.problems)
    listed = set(series.entries)
    missing = [n for n in series.entries if not (patches_dir / n).is_file()]
    problems.extend(f"series lists {n}, but there is no such file" for n in missing)
    present = sorted(p.name for p in patches_dir.glob("*.patch")) if patches_dir.is_dir() else []
    problems.extend(f"{n} is not listed in series" for n in present if n not in listed)
    for name in series.entries:
        if name in missing:
            continue
        info = parse_patch(patches_dir / name)
        problems.extend(f"{name}: {p}" for p in info.problems)
        if info.subject and patch_name(info.subject) != name:
            problems.append(
                f"{name}: named {name} but its subject gives {patch_name(info.subject)}"
            )
    if not round_trip or missing or series.problems:
        return problems
    with tempfile.TemporaryDirectory(prefix="series-check-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "patches"
        out.mkdir()
        if (patches_dir / SERIES_FILE).exists():
            shutil.copyfile(patches_dir / SERIES_FILE, out / SERIES_FILE)
        try:
            assert source is not None
            import_series(src, patches_dir=patches_dir, source=source, version=version)
            names = export_series(src, out, base_tag(version), quiet=True)
        except SeriesError as exc:
            problems.append(f"round trip failed: {exc}")
            return problems
        for name in [SERIES_FILE, *names]:
            if (
                not (patches_dir / name).exists()
                or (patches_dir / name).read_bytes() != (out / name).read_bytes()
            ):
                problems.append(
                    f"{name} differs from what import+export produces (run import, then export):\n"
                    + _file_diff(patches_dir / name, out / name, name)
                )
    return problems


# --------------------------------------------------------------------- commands


def new_patch(src: Path, subject: str, trailers: dict[str, str], *, stage_all: bool) -> str:
    """Commit the changes in the import tree as a new patch with a trailer template.

    Trailers not given are written as ``TODO`` placeholders, which ``check``
    rejects until they are filled in (``git commit --amend``).

    Returns:
        The patch file name the commit will export to.
    """
    if not (src / ".git").exists():
        raise SeriesError(f"{src} is not a git work tree; run `proxima_tools.series import` first")
    if "\n" in subject.strip() or not subject.strip():
        raise SeriesError("the subject must be one non-empty line")
    if stage_all:
        git("add", "--all", cwd=src, isolated=False)
    if git("diff", "--cached", "--quiet", cwd=src, check=False, isolated=False).returncode == 0:
        raise SeriesError(f"nothing staged in {src}; `git add` your changes or pass --all")
    today = dt.date.today().isoformat()
    values = {key: trailers.get(key) or "TODO" for key in REQUIRED_TRAILERS}
    if not trailers.get("Last-Update"):
        values["Last-Update"] = today
    body = "\n".join(f"{key}: {values[key]}" for key in REQUIRED_TRAILERS)
    message = f"{subject.strip()}\n\n{body}\n"
    git(
        "commit",
        "--quiet",
        "--no-verify",
        "-F",
        "-",
        cwd=src,
        isolated=False,
        stdin=message.encode(),
    )
    name = patch_name(subject)
    todo = [k for k, v in values.items() if v == "TODO"]
    if todo:
        log(f"fill in {', '.join(todo)} with `git -C {src} commit --amend` before exporting")
    return name


def apply_to_target(patches_dir: Path, target: Path, *, check_only: bool = False) -> list[str]:
    """Apply the series to a folder holding ``vllm/`` (e.g. an unpacked wheel).

    All patches are applied as one ``git apply`` transaction: either every
    patch applies or nothing is changed.  A target that already carries the
    whole series is detected and left alone.

    Returns:
        The names of the patches applied (empty if none or already applied).
    """
    if not (target / PACKAGE).is_dir():
        raise SeriesError(f"{target} has no {PACKAGE}/ folder")
    patches = listed_patches(patches_dir)
    if not patches:
        log("the series is empty; nothing to apply")
        return []
    # Stop git from finding an enclosing repository (paths outside the current
    # folder would otherwise be skipped silently).
    env = {"GIT_CEILING_DIRECTORIES": str(target.resolve().parent)}
    stream = b"".join(p.read_bytes() for p in patches)
    forward = git(
        "apply",
        "--check",
        "--whitespace=nowarn",
        "-",
        cwd=target,
        check=False,
        extra_env=env,
        stdin=stream,
    )
    if forward.returncode != 0:
        reverse = git(
            "apply",
            "--check",
            "--reverse",
            "--whitespace=nowarn",
            "-",
            cwd=target,
            check=False,
            extra_env=env,
            stdin=stream,
        )
        if reverse.returncode == 0:
            log(f"{target} already carries the whole series; nothing to do")
            return []
        culprit = patches[-1].name
        for k in range(1, len(patches) + 1):
            part = b"".join(p.read_bytes() for p in patches[:k])
            res = git(
                "apply",
                "--check",
                "--whitespace=nowarn",
                "-",
                cwd=target,
                check=False,
                extra_env=env,
                stdin=part,
            )
            if res.returncode != 0:
                culprit = patches[k - 1].name
                break
        raise SeriesError(
            f"the series does not apply to {target} (first failing patch: {culprit}); "
            f"nothing was changed:\n{forward.stderr.strip()[-3000:]}"
        )
    if check_only:
        log(f"all {len(patches)} patch(es) apply cleanly to {target} (--check: nothing changed)")
        return [p.name for p in patches]
    git("apply", "--whitespace=nowarn", "-", cwd=target, extra_env=env, stdin=stream)
    for p in patches:
        log(f"applied {p.name}")
    return [p.name for p in patches]


@dataclass
class ChangedFile:
    """A file the series changes: net status, old path (renames), patches touching it."""

    status: str
    old_path: str | None = None
    patches: list[str] = field(default_factory=list)


def _net_status(previous: str, new: str) -> str:
    if previous == "A":
        return "gone" if new == "D" else "A"
    if previous == "gone":
        return "A" if new == "A" else "gone"
    if previous == "D":
        return "M" if new == "A" else "D"
    return "D" if new == "D" else previous


def changed_files(patches_dir: Path) -> dict[str, ChangedFile]:
    """Return the files the series changes, sorted by path.

    Status is the net effect over the series as far as headers tell: ``A``
    (added), ``D`` (deleted), ``R`` (renamed, with ``old_path``) or ``M``.
    A file added by one patch and deleted by a later one is left out.
    """
    result: dict[str, ChangedFile] = {}
    for patch in listed_patches(patches_dir):
        for change in parse_patch(patch).changes:
            entry = result.get(change.path)
            if entry is None:
                entry = result[change.path] = ChangedFile(change.status, change.old_path)
            else:
                entry.status = _net_status(entry.status, change.status)
            if patch.name not in entry.patches:
                entry.patches.append(patch.name)
    return {k: result[k] for k in sorted(result) if result[k].status != "gone"}


def wheel_notes(patches_dir: Path, lock: dict[str, Any]) -> list[str]:
    """Name patched files that differ between the sdist and a locked wheel.

    Such patches are made against the sdist's version of the file and may not
    apply to the wheel's (``apply --target`` would say so); worth knowing early.
    """
    notes: list[str] = []
    files = changed_files(patches_dir)
    for name, art in sorted(lock.get("artifacts", {}).items()):
        for path in art.get("differs_from_sdist", []):
            if path in files:
                patches = ", ".join(files[path].patches)
                notes.append(f"{path} differs in the {name} wheel; patched by {patches}")
    return notes


def _iter_paths(files: dict[str, ChangedFile], with_status: bool) -> Iterator[str]:
    for path, entry in files.items():
        if with_status:
            old = f" (from {entry.old_path})" if entry.old_path else ""
            yield f"{entry.status} {path}{old}"
        else:
            yield path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--patches-dir", type=Path, help=f"patch folder (default ${PATCHES_ENV} or patches/vllm)"
    )
    parser.add_argument("--lock", type=Path, help="lock file (default upstream.lock)")
    parser.add_argument(
        "--upstream",
        type=Path,
        help=f"sdist tarball or folder with vllm/ (default: ${UPSTREAM_SRC_ENV}, else the lock)",
    )
    parser.add_argument("--offline", action="store_true", help="never download the sdist")
    sub = parser.add_subparsers(dest="command", required=True)

    p_import = sub.add_parser(
        "import", help="make a git work tree: upstream base + one commit per patch"
    )
    p_import.add_argument(
        "--dest", type=Path, default=DEFAULT_SRC, help="work tree (default build/vllm-src)"
    )
    p_import.add_argument(
        "--force", action="store_true", help="replace dest even if it holds unexported work"
    )
    p_import.add_argument(
        "--base-only", action="store_true", help="stop after the upstream base commit"
    )
    p_export = sub.add_parser(
        "export", help="write the work tree's commits back to the patch folder"
    )
    p_export.add_argument(
        "--src", type=Path, default=DEFAULT_SRC, help="work tree (default build/vllm-src)"
    )
    sub.add_parser("check", help="verify the series (files, trailers, byte-identical round trip)")
    p_new = sub.add_parser("new", help="commit the staged changes of the work tree as a new patch")
    p_new.add_argument("subject", help="commit subject; the patch file name derives from it")
    p_new.add_argument("--src", type=Path, default=DEFAULT_SRC)
    p_new.add_argument("-a", "--all", action="store_true", help="stage all changes first")
    for key in REQUIRED_TRAILERS:
        p_new.add_argument(
            f"--{key.lower()}",
            dest=key.replace("-", "_").lower(),
            metavar="TEXT",
            help=f"{key}: trailer",
        )
    p_changed = sub.add_parser("changed-files", help="list the files the series changes")
    p_changed.add_argument(
        "--json", action="store_true", help="JSON with status and patches per file"
    )
    p_changed.add_argument("--status", action="store_true", help="prefix each path with A/M/D/R")
    p_apply = sub.add_parser(
        "apply", help="apply the series to a folder holding vllm/ (e.g. an unpacked wheel)"
    )
    p_apply.add_argument("--target", type=Path, required=True)
    p_apply.add_argument("--check", action="store_true", help="only check that it applies")
    args = parser.parse_args(argv)

    patches_dir: Path = (args.patches_dir or patches_dir_default()).resolve()
    try:
        lock = upstream.load_lock(args.lock)
        version = upstream.upstream_version(lock)
        if args.command == "import":
            source = resolve_upstream_source(args.upstream, lock=lock, offline=args.offline)
            import_series(
                args.dest.resolve(),
                patches_dir=patches_dir,
                source=source,
                version=version,
                force=args.force,
                apply_patches=not args.base_only,
            )
        elif args.command == "export":
            export_series(args.src.resolve(), patches_dir, base_tag(version))
        elif args.command == "check":
            started = time.monotonic()
            source = resolve_upstream_source(args.upstream, lock=lock, offline=args.offline)
            problems = check_series(patches_dir, source=source, version=version)
            if problems:
                print(
                    f"series check FAILED ({len(problems)} problem(s)) for {patches_dir}:",
                    file=sys.stderr,
                )
                for problem in problems:
                    print(f"  - {problem}", file=sys.stderr)
                return 1
            for note in wheel_notes(patches_dir, lock):
                log(f"note: {note}")
            count = len(read_series(patches_dir / SERIES_FILE).entries)
            elapsed = time.monotonic() - started
            log(f"series check ok: {count} patch(es), round trip byte-identical ({elapsed:.1f} s)")
        elif args.command == "new":
            trailers = {k: getattr(args, k.replace("-", "_").lower()) for k in REQUIRED_TRAILERS}
            name = new_patch(
                args.src.resolve(),
                args.subject,
                {k: v for k, v in trailers.items() if v},
                stage_all=args.all,
            )
            log(f"committed; `python3 -m proxima_tools.series export` will write it as {name}")
        elif args.command == "changed-files":
            files = changed_files(patches_dir)
            if args.json:
                print(json.dumps({k: asdict(v) for k, v in files.items()}, indent=2))
            else:
                for line in _iter_paths(files, args.status):
                    print(line)
        elif args.command == "apply":
            apply_to_target(patches_dir, args.target.resolve(), check_only=args.check)
    except (SeriesError, upstream.UpstreamError) as exc:
        print(f"series.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("series.py: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
