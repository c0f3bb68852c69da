"""What goes into the wheel besides upstream's files: the patch series' changes read from the
patched tree (``git diff upstream-<pin> HEAD``) and the ``vllm_proxima`` package."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proxima_tools.wheels.common import (
    OVERLAY_ROOT,
    PACKAGE_EXTRA_FILES,
    PACKAGE_NAME,
    PACKAGE_SUFFIXES,
    PLUGIN_ENTRY,
    BuildError,
    log,
)
from proxima_tools.wheels.zipwriter import EXEC_MODE, FILE_MODE


@dataclass(frozen=True)
class Change:
    """One file the patch series changed: 'A'dded, 'M'odified or 'D'eleted."""

    path: str
    status: str
    data: bytes | None
    mode: int


@dataclass(frozen=True)
class Overlay:
    """The patch series as files: what changed between ``base_ref`` and ``HEAD``."""

    tree: Path
    base_ref: str
    base_commit: str
    head_commit: str
    commits: int
    changes: tuple[Change, ...]
    base_blobs: dict[str, bytes]


def _git(tree: Path, *args: str) -> bytes:
    """Run git in ``tree`` and return stdout; raise BuildError with git's message."""
    cmd = ["git", "-C", str(tree), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise BuildError("git is not installed (needed to read --patched-tree)") from exc
    if done.returncode != 0:
        msg = done.stderr.decode(errors="replace").strip()
        raise BuildError(f"`{' '.join(cmd)}` failed: {msg}")
    return done.stdout


def _rev(tree: Path, ref: str) -> str:
    return _git(tree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()


def _is_ancestor(tree: Path, ancestor: str, commit: str) -> bool:
    cmd = ["git", "-C", str(tree), "merge-base", "--is-ancestor", ancestor, commit]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def _diff_entries(tree: Path, base_ref: str) -> list[tuple[str, str]]:
    """(status, path) for each file changed from ``base_ref`` to ``HEAD``, renames split."""
    raw = _git(tree, "diff", "--no-renames", "--name-status", "-z", base_ref, "HEAD", "--")
    fields = raw.decode().split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    if len(fields) % 2:
        raise BuildError(f"unexpected `git diff --name-status -z` output in {tree}")
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields), 2)]


def _tree_modes(tree: Path, paths: Sequence[str]) -> dict[str, int]:
    """Git file modes of ``paths`` at HEAD (e.g. 0o100644)."""
    if not paths:
        return {}
    out = _git(tree, "ls-tree", "-z", "HEAD", "--", *paths).decode()
    modes: dict[str, int] = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        modes[path] = int(meta.split()[0], 8)
    return modes


def _check_change(status: str, path: str) -> None:
    if status not in {"A", "M", "D"}:
        raise BuildError(
            f"patch series changes {path} in a way a wheel overlay can't carry "
            f"(git status {status!r}; only add/modify/delete of regular files)"
        )
    if not path.startswith(OVERLAY_ROOT):
        raise BuildError(
            f"patch series changes {path}, which is outside {OVERLAY_ROOT}: only "
            "files of the vllm package can be overlaid onto a binary wheel "
            "(compiled code and packaging files need a source build)"
        )


def load_overlay(tree: Path, base_ref: str) -> Overlay:
    """Read the patch series' changed files from ``tree``.

    NOTE: there is no build without the series: a wheel of upstream's files alone would carry
    proxima's name and version and silently lack the hooks, so a missing tree or one without
    commits beyond the base is an error.

    Raises:
        BuildError: If the tree does not exist or is not a git work tree, lacks ``base_ref``,
            HEAD does not descend from it or equals it, or a change can't be carried by a wheel
            overlay.
    """
    if not tree.exists():
        raise BuildError(
            f"the patched tree {tree} does not exist, and a wheel without it would carry "
            "upstream's files without the patch series under proxima's name and version. "
            f"Make it with `python -m proxima_tools.series import --dest {tree}` (bash "
            "scripts/setup.sh does), or pass --patched-tree DIR"
        )
    if not (tree / ".git").exists():
        raise BuildError(
            f"{tree} is not a git work tree (expected python3 -m proxima_tools.series import "
            "to have made it); pass --patched-tree with the right folder"
        )
    base = _rev(tree, base_ref)
    if not base:
        raise BuildError(
            f"{tree} has no {base_ref!r} tag/ref; was it made by proxima_tools.series import?"
        )
    head = _rev(tree, "HEAD")
    if not _is_ancestor(tree, base, head):
        raise BuildError(f"HEAD of {tree} does not descend from {base_ref}")
    commits = int(_git(tree, "rev-list", "--count", f"{base}..{head}").decode())
    if commits == 0:
        raise BuildError(
            f"the patched tree {tree} has no commits beyond {base_ref}: the patch series is not "
            "applied. Re-import it with `python -m proxima_tools.series import --force`"
        )
    if _git(tree, "status", "--porcelain", "--untracked-files=no").strip():
        log(f"warning: {tree} has uncommitted changes; only committed ones (HEAD) are used")
    entries = _diff_entries(tree, base)
    for status, path in entries:
        _check_change(status, path)
    modes = _tree_modes(tree, [p for s, p in entries if s != "D"])
    changes: list[Change] = []
    base_blobs: dict[str, bytes] = {}
    for status, path in sorted(entries, key=lambda e: e[1]):
        mode = modes.get(path, FILE_MODE)
        if status != "D" and mode not in (FILE_MODE, EXEC_MODE):
            raise BuildError(f"patch series makes {path} a non-regular file (mode {mode:o})")
        data = _git(tree, "cat-file", "blob", f"{head}:{path}") if status != "D" else None
        if status != "A":
            base_blobs[path] = _git(tree, "cat-file", "blob", f"{base}:{path}")
        changes.append(Change(path, status, data, mode))
    log(
        f"patched tree {tree}: {commits} commit(s) beyond {base_ref}, "
        f"{len(changes)} file(s) changed: " + ", ".join(f"{c.status} {c.path}" for c in changes)
    )
    return Overlay(tree, base_ref, base, head, commits, tuple(changes), base_blobs)


def collect_package(package: Path) -> dict[str, bytes]:
    """``vllm_proxima/...`` archive name -> bytes for the package's .py/.pyi and py.typed."""
    if not package.is_dir():
        raise BuildError(
            f"proxima package not found at {package}: pass --package with the "
            f"folder of the {PACKAGE_NAME} package (vllm-proxima/src/{PACKAGE_NAME})"
        )
    if package.name != PACKAGE_NAME:
        raise BuildError(f"--package must be a folder named {PACKAGE_NAME}, not {package.name}")
    if not (package / "__init__.py").is_file():
        raise BuildError(f"{package} has no __init__.py")
    files: dict[str, bytes] = {}
    skipped: list[str] = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if "__pycache__" in rel.parts or not path.is_file():
            continue
        if path.suffix in PACKAGE_SUFFIXES or path.name in PACKAGE_EXTRA_FILES:
            files[f"{PACKAGE_NAME}/{rel.as_posix()}"] = path.read_bytes()
        else:
            skipped.append(rel.as_posix())
    if skipped:
        log(f"warning: not packaged (only .py/.pyi/.json/py.typed are): {', '.join(skipped)}")
    if f"{PACKAGE_NAME}/plugin.py" not in files:
        log(
            f"warning: {package} has no plugin.py; the entry point {PLUGIN_ENTRY[2]} "
            "will fail to load until it exists"
        )
    return files


def check_package_version(files: dict[str, bytes], proxima_version: str) -> None:
    """Warn if ``vllm_proxima.__version__`` disagrees with the version we stamp."""
    init = files.get(f"{PACKAGE_NAME}/__init__.py", b"").decode(errors="replace")
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", init, re.MULTILINE)
    if match and match.group(1) != proxima_version:
        log(
            f"warning: {PACKAGE_NAME}.__version__ is {match.group(1)!r} but VERSION says "
            f"{proxima_version!r}"
        )
