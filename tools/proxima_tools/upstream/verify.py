"""sha256 checks of local files, with a stamp beside each so an unchanged file is not re-hashed."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from proxima_tools.upstream.lock import CHUNK, HashMismatch, UpstreamError


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.verified")


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    stamp = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    with contextlib.suppress(OSError):
        _stamp_path(path).write_text(json.dumps(stamp) + "\n")


def _stamp_matches(path: Path, sha256: str) -> bool:
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return bool(stamp == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def verify_file(path: Path, sha256: str, *, quick: bool = False) -> None:
    """Check that ``path`` has the expected sha256.

    Args:
        path: File to check.
        sha256: Expected hex digest.
        quick: Trust a matching ``.<name>.verified`` stamp (same size and mtime)
            instead of re-hashing.

    Raises:
        HashMismatch: Naming both hashes when they differ.
        UpstreamError: If the file does not exist.
    """
    if not path.is_file():
        raise UpstreamError(f"{path}: no such file")
    if quick and _stamp_matches(path, sha256):
        return
    actual = sha256_file(path)
    if actual != sha256:
        raise HashMismatch(
            f"{path}: sha256 mismatch\n  expected (upstream.lock): {sha256}\n"
            f"  actual (file bytes):      {actual}"
        )
    _write_stamp(path, sha256)
