"""``import``: the pinned sdist's ``vllm/`` as a tagged base commit, then one commit per patch."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

from proxima_tools import upstream
from proxima_tools.series.common import (
    AM_OPTIONS,
    BASE_DATE,
    BASE_IDENTITY,
    PACKAGE,
    UPSTREAM_SRC_ENV,
    SeriesError,
    base_tag,
    git,
    log,
)
from proxima_tools.series.export import export_series
from proxima_tools.series.seriesfile import listed_patches


def resolve_upstream_source(
    spec: Path | None = None, *, lock: dict[str, Any] | None = None, offline: bool = False
) -> Path:
    """Return the upstream source: an sdist tarball or a folder holding ``vllm/``.

    Order: ``spec``, then ``PROXIMA_UPSTREAM_SRC``, then the locked sdist
    (fetched and verified through proxima_tools.upstream).
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
        # NOTE: it names the old scripts/series.py on purpose: the text is part of the base commit,
        # and changing it would change the commit ids of every imported tree.
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
