"""The package index (PEP 691 JSON): a project's files and their hashes, and downloads."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from proxima_tools.upstream.lock import (
    CHUNK,
    DEFAULT_INDEX,
    INDEX_ENV,
    PEP691_ACCEPT,
    USER_AGENT,
    HashMismatch,
    UpstreamError,
    log,
)
from proxima_tools.upstream.verify import _write_stamp


@dataclass(frozen=True)
class IndexFile:
    """One file entry of a PEP 691 project page."""

    filename: str
    url: str
    sha256: str | None
    size: int | None
    yanked: bool


@dataclass(frozen=True)
class IndexProject:
    """A PEP 691 project page: its versions and files (by filename)."""

    name: str
    versions: tuple[str, ...]
    files: dict[str, IndexFile]


def index_url() -> str:
    """Return the simple-index base URL (``PROXIMA_PYPI_INDEX`` or PyPI)."""
    return os.environ.get(INDEX_ENV, DEFAULT_INDEX).rstrip("/")


def _normalize(project: str) -> str:
    out = []
    prev_sep = False
    for ch in project.lower():
        if ch in "-_.":
            if not prev_sep:
                out.append("-")
            prev_sep = True
        else:
            out.append(ch)
            prev_sep = False
    return "".join(out)


def fetch_index(project: str, *, timeout: float = 60.0, base: str | None = None) -> IndexProject:
    """Fetch a project's PEP 691 JSON page from the simple index.

    Args:
        project: Distribution name (normalised per PEP 503).
        timeout: Socket timeout in seconds.
        base: Index base URL; defaults to :func:`index_url`.

    Returns:
        The project's versions and files.

    Raises:
        UpstreamError: On network errors or an unexpected answer.
    """
    url = f"{(base or index_url()).rstrip('/')}/{_normalize(project)}/"
    request = urllib.request.Request(
        url, headers={"Accept": PEP691_ACCEPT, "User-Agent": USER_AGENT}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            content_type = response.headers.get("Content-Type", "")
            body = response.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise UpstreamError(f"cannot read the index page {url}: {exc}") from exc
    if "json" not in content_type:
        raise UpstreamError(f"{url} answered {content_type!r}, not PEP 691 JSON")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise UpstreamError(f"{url}: invalid JSON: {exc}") from exc
    files: dict[str, IndexFile] = {}
    for entry in data.get("files", []):
        yanked = entry.get("yanked", False)
        files[entry["filename"]] = IndexFile(
            filename=entry["filename"],
            url=entry["url"],
            sha256=(entry.get("hashes") or {}).get("sha256"),
            size=entry.get("size"),
            yanked=bool(yanked),
        )
    return IndexProject(
        name=str(data.get("name", project)), versions=tuple(data.get("versions", [])), files=files
    )


def download(
    url: str,
    target: Path,
    sha256: str,
    *,
    size: int | None = None,
    timeout: float = 60.0,
    max_seconds: float | None = 1800.0,
) -> Path:
    """Download ``url`` to ``target`` and verify its sha256.

    The bytes go to ``.<name>.part`` next to ``target`` and are renamed into
    place only once their sha256 matches.

    Args:
        url: Where to get the file.
        target: Final path.
        sha256: Expected hex digest of the bytes.
        size: Expected size, for progress lines (optional).
        timeout: Socket timeout in seconds (per read).
        max_seconds: Give up when the whole download takes longer (None: no limit).

    Returns:
        ``target``.

    Raises:
        HashMismatch: If the downloaded bytes have another sha256.
        UpstreamError: On network errors or when ``max_seconds`` is exceeded.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part")
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    digest = hashlib.sha256()
    started = time.monotonic()
    last_report = started
    done = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, part.open("wb") as out:
            total = size or int(response.headers.get("Content-Length") or 0) or None
            log(f"downloading {url} ({_human(total)})")
            while chunk := response.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                now = time.monotonic()
                if max_seconds is not None and now - started > max_seconds:
                    raise UpstreamError(
                        f"download of {url} took longer than {max_seconds:.0f} s; giving up"
                    )
                if now - last_report >= 5.0:
                    last_report = now
                    pct = f" {100 * done / total:5.1f}%" if total else ""
                    rate = done / max(now - started, 1e-6)
                    log(f"  {target.name}:{pct} {_human(done)} at {_human(int(rate))}/s")
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise UpstreamError(f"download of {url} failed: {exc}") from exc
    except UpstreamError:
        part.unlink(missing_ok=True)
        raise
    actual = digest.hexdigest()
    if actual != sha256:
        part.unlink(missing_ok=True)
        raise HashMismatch(
            f"downloaded bytes of {url} do not match\n  expected: {sha256}\n  actual:   {actual}\n"
            "nothing was kept"
        )
    os.replace(part, target)
    _write_stamp(target, sha256)
    log(f"  {target.name}: {_human(done)} in {time.monotonic() - started:.1f} s, sha256 ok")
    return target


def _human(n: int | None) -> str:
    if n is None:
        return "size unknown"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{n} B"
