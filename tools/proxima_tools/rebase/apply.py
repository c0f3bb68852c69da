"""Applying the series onto a release in a scratch repository: one outcome per patch (applied,
3-way, merge, upstreamed or conflict) and what upstream itself changed in the patched files."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from proxima_tools import series
from proxima_tools.rebase.common import MAX_DETAIL_LINES, MAX_HUNK_LINES, PatchResult, _trim, log


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return series.git(*args, cwd=repo, check=check)


def _reset(repo: Path) -> None:
    for cmd in (("am", "--abort"), ("cherry-pick", "--abort")):
        _git(repo, *cmd, check=False)
    _git(repo, "reset", "--quiet", "--hard")
    _git(repo, "clean", "-fdxq")


def _head(repo: Path) -> str:
    return _git(repo, "rev-parse", "HEAD").stdout.strip()


def _interesting(output: str) -> list[str]:
    keep = ("CONFLICT", "error:", "does not exist", "No changes", "Auto-merging", "warning:")
    lines = [line.strip() for line in output.splitlines() if any(k in line for k in keep)]
    return list(dict.fromkeys(lines))


def try_patch(repo: Path, patch: Path, commit: str) -> PatchResult:
    """Try one patch on the current HEAD of ``repo`` (clean, 3-way, merge)."""
    before = _head(repo)
    result = _git(repo, "am", *series.AM_OPTIONS, str(patch), check=False)
    if result.returncode == 0:
        return PatchResult(patch.name, "applied" if _head(repo) != before else "upstreamed")
    clean_out = result.stdout + result.stderr
    _reset(repo)
    result = _git(repo, "am", "-3", *series.AM_OPTIONS, str(patch), check=False)
    out3 = result.stdout + result.stderr
    if result.returncode == 0:
        status = "applied-3way" if _head(repo) != before else "upstreamed"
        return PatchResult(patch.name, status, detail=_trim(_interesting(out3), 10))
    conflict_files = sorted(set(re.findall(r"CONFLICT \([^)]*\): .*?(?:in|of) (\S+)", out3)))
    _reset(repo)
    pick = _git(
        repo, "cherry-pick", "--allow-empty", "--keep-redundant-commits", commit, check=False
    )
    if pick.returncode == 0:
        changed = _git(repo, "diff", "--quiet", "HEAD^", "HEAD", check=False).returncode != 0
        if not changed:
            _git(repo, "reset", "--quiet", "--hard", "HEAD^")
        return PatchResult(
            patch.name,
            "applied-merge" if changed else "upstreamed",
            detail=_trim(_interesting(pick.stdout + pick.stderr), 10),
        )
    merge_conflict = _trim(
        _git(repo, "diff", "--no-color", check=False).stdout.splitlines(), MAX_DETAIL_LINES
    )
    _reset(repo)
    _git(repo, "apply", "--reject", "--whitespace=nowarn", str(patch), check=False)
    rejects = sorted((repo / series.PACKAGE).rglob("*.rej"))
    hunks: list[str] = []
    for rej in rejects:
        rel = rej.relative_to(repo).as_posix()
        hunks.append(f"--- {rel}")
        hunks.extend(
            _trim(rej.read_text(encoding="utf-8", errors="replace").splitlines(), MAX_HUNK_LINES)
        )
    detail = _trim(
        _interesting(out3) + [f"clean apply: {line}" for line in _interesting(clean_out)], 20
    )
    _reset(repo)
    return PatchResult(
        patch.name,
        "conflict",
        detail=detail,
        conflict_files=conflict_files,
        rejected_hunks="\n".join(_trim(hunks, MAX_DETAIL_LINES)),
        merge_conflict="\n".join(merge_conflict),
    )


def import_release(repo: Path, tarball: Path, version: str, base: str) -> str:
    """Commit a release's ``vllm/`` tree on top of ``base``; tag ``upstream-<version>``."""
    _reset(repo)
    _git(repo, "checkout", "--quiet", "--force", "--detach", base)
    _git(repo, "rm", "-r", "--quiet", "--cached", "--ignore-unmatch", series.PACKAGE)
    shutil.rmtree(repo / series.PACKAGE, ignore_errors=True)
    count = series.populate_tree(tarball, repo)
    series.commit_all(
        repo,
        f"vLLM {version} upstream ({series.PACKAGE}/ package)\n",
        identity=series.BASE_IDENTITY,
        date=series.BASE_DATE,
    )
    tag = series.base_tag(version)
    _git(repo, "tag", "--force", tag)
    log(f"{version}: imported {count} files as {tag}")
    return tag


def _commit_id(repo: Path) -> str | None:
    version_py = repo / series.PACKAGE / "_version.py"
    if not version_py.exists():
        return None
    match = re.search(r"__commit_id__\s*=\s*commit_id\s*=\s*'([^']*)'", version_py.read_text())
    return match.group(1) if match else None


def upstream_touched(
    repo: Path, base: str, release_tag: str, paths: Sequence[str]
) -> dict[str, str]:
    """Describe how upstream changed the files the series patches (``+a -d`` or ``deleted``)."""
    touched: dict[str, str] = {}
    if not paths:
        return touched
    numstat = _git(
        repo, "diff", "--numstat", "--no-renames", base, release_tag, "--", *paths
    ).stdout
    for line in numstat.splitlines():
        added, deleted, path = line.split("\t", 2)
        touched[path] = f"+{added} -{deleted}"
    for path in paths:
        exists = _git(repo, "cat-file", "-e", f"{release_tag}:{path}", check=False).returncode == 0
        if (
            not exists
            and _git(repo, "cat-file", "-e", f"{base}:{path}", check=False).returncode == 0
        ):
            touched[path] = "deleted upstream"
    return touched


def overall_status(results: Sequence[PatchResult]) -> str:
    """Summarise patch results: clean, 3-way, merge or conflict."""
    states = {r.status for r in results}
    if "conflict" in states:
        return "conflict"
    if "applied-merge" in states:
        return "merge"
    if "applied-3way" in states:
        return "3-way"
    return "clean"
