"""Making a locked artifact present: from the cache, a seed folder or the index, always verified."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from proxima_tools.upstream.index import IndexProject, download, fetch_index, index_url
from proxima_tools.upstream.lock import (
    CACHE_ENV,
    DEFAULT_DEST,
    DEFAULT_SEEDS,
    SEED_ENV,
    HashMismatch,
    UpstreamError,
    get_artifact,
    log,
)
from proxima_tools.upstream.verify import _write_stamp, verify_file


def default_dest() -> Path:
    """Return the cache folder (``PROXIMA_UPSTREAM_CACHE`` or ``.cache/upstream``)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else DEFAULT_DEST


def seed_dirs() -> tuple[Path, ...]:
    """Return the folders searched for already-downloaded files."""
    env = os.environ.get(SEED_ENV)
    if env is None:
        return DEFAULT_SEEDS
    return tuple(Path(p) for p in env.split(os.pathsep) if p)


def _place(src: Path, target: Path) -> str:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.seed")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        how = "hard-linked"
    except OSError:
        shutil.copy2(src, tmp)
        how = "copied"
    os.replace(tmp, target)
    return how


def ensure_file(
    project: str,
    filename: str,
    sha256: str | None,
    dest: Path,
    *,
    redownload: bool = False,
    offline: bool = False,
    index: IndexProject | None = None,
    max_seconds: float | None = 1800.0,
) -> Path:
    """Make ``dest/filename`` exist with the right sha256; download if needed.

    Args:
        project: PyPI project the file belongs to.
        filename: File name as listed in the index.
        sha256: Expected digest; None trusts the index's digest (rebase probe).
        dest: Destination folder.
        redownload: Replace a file in ``dest`` whose sha256 is wrong instead of refusing.
        offline: Never touch the network (seed folders only).
        index: An already fetched index page for ``project``.
        max_seconds: Time bound for the download.

    Returns:
        The verified local path.

    Raises:
        HashMismatch: A cached file or the index disagrees with ``sha256``.
        UpstreamError: The file is not in the index, or network problems.
    """
    target = dest / filename
    if target.exists() and sha256 is not None:
        try:
            verify_file(target, sha256, quick=True)
            log(f"{filename}: present in {dest}, sha256 ok")
            return target
        except HashMismatch as exc:
            if not redownload:
                raise HashMismatch(
                    f"{exc}\nrefusing to use it; delete it or pass --redownload"
                ) from exc
            log(f"{filename}: cached copy is bad, downloading again")
            target.unlink()
    if sha256 is not None:
        for seed in seed_dirs():
            candidate = seed / filename
            if not candidate.is_file() or candidate.resolve() == target.resolve():
                continue
            try:
                verify_file(candidate, sha256)
            except HashMismatch as exc:
                log(f"ignoring seed file: {exc}")
                continue
            how = _place(candidate, target)
            _write_stamp(target, sha256)
            log(f"{filename}: {how} from {seed} (sha256 ok), not downloaded")
            return target
    if offline:
        raise UpstreamError(
            f"{filename} is not in {dest} or a seed folder, and --offline was given"
        )
    index = index or fetch_index(project)
    entry = index.files.get(filename)
    if entry is None:
        raise UpstreamError(
            f"{filename} is not listed on the index page of {project!r} ({index_url()}/{project}/)"
        )
    if entry.yanked:
        log(f"warning: {filename} is yanked on the index")
    if sha256 is not None and entry.sha256 is not None and entry.sha256.lower() != sha256:
        raise HashMismatch(
            f"the index's sha256 for {filename} is not the locked one\n"
            f"  upstream.lock: {sha256}\n  index:         {entry.sha256}\nrefusing to download"
        )
    expected = sha256 or (entry.sha256.lower() if entry.sha256 else None)
    if expected is None:
        raise UpstreamError(
            f"the index gives no sha256 for {filename}; refusing to download unverified bytes"
        )
    if target.exists() and sha256 is None:
        try:
            verify_file(target, expected, quick=True)
            log(f"{filename}: present in {dest}, sha256 ok")
            return target
        except HashMismatch:
            log(f"{filename}: cached copy does not match the index, downloading again")
            target.unlink()
    return download(entry.url, target, expected, size=entry.size, max_seconds=max_seconds)


def fetch_artifact(
    name: str,
    dest: Path | None = None,
    *,
    lock: dict[str, Any] | None = None,
    redownload: bool = False,
    offline: bool = False,
) -> Path:
    """Return the local, verified path of a locked artifact, fetching it if needed.

    Args:
        name: ``sdist``, ``cuda`` or ``cpu`` (keys of ``[artifacts]``).
        dest: Cache folder; defaults to :func:`default_dest`.
        lock: Parsed lock; defaults to :func:`load_lock`.
        redownload: Replace a bad cached copy instead of refusing.
        offline: Only use files already present (dest or seeds).

    Returns:
        Path to the verified file.
    """
    art = get_artifact(name, lock)
    return ensure_file(
        art.project,
        art.filename,
        art.sha256,
        dest or default_dest(),
        redownload=redownload,
        offline=offline,
    )


def verify_artifacts(
    names: Iterable[str], dest: Path, lock: dict[str, Any] | None = None
) -> list[str]:
    """Fully re-hash every locked artifact present in ``dest``.

    Returns:
        Problem messages (empty when all present files are good).
    """
    problems: list[str] = []
    for name in names:
        art = get_artifact(name, lock)
        path = dest / art.filename
        if not path.exists():
            log(f"{name}: {art.filename} not present in {dest} (skipped)")
            continue
        started = time.monotonic()
        try:
            verify_file(path, art.sha256)
        except UpstreamError as exc:
            problems.append(str(exc))
            log(f"{name}: BAD {exc}")
            continue
        log(f"{name}: {art.filename} sha256 ok ({time.monotonic() - started:.1f} s)")
    return problems
