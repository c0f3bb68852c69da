"""``apply`` onto another tree (a release, a wheel's files) and ``changed-files``: what the series
touches, net over all patches."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxima_tools.series.common import PACKAGE, SeriesError, git, log
from proxima_tools.series.patchfile import parse_patch
from proxima_tools.series.seriesfile import listed_patches


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
