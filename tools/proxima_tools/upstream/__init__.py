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

from proxima_tools.upstream.cli import (
    main,
)
from proxima_tools.upstream.describe import (
    ARTIFACT_PATTERNS,
    describe_release,
)
from proxima_tools.upstream.fetch import (
    default_dest,
    ensure_file,
    fetch_artifact,
    seed_dirs,
    verify_artifacts,
)
from proxima_tools.upstream.index import (
    IndexFile,
    IndexProject,
    download,
    fetch_index,
    index_url,
)
from proxima_tools.upstream.lock import (
    ARTIFACT_NAMES,
    CACHE_ENV,
    CHUNK,
    DEFAULT_DEST,
    DEFAULT_INDEX,
    DEFAULT_LOCK,
    DEFAULT_SEEDS,
    INDEX_ENV,
    LOCK_ENV,
    PEP691_ACCEPT,
    SEED_ENV,
    USER_AGENT,
    Artifact,
    HashMismatch,
    UpstreamError,
    get_artifact,
    load_lock,
    lock_path,
    log,
    upstream_version,
)
from proxima_tools.upstream.verify import (
    sha256_file,
    verify_file,
)

__all__ = [
    "ARTIFACT_NAMES",
    "ARTIFACT_PATTERNS",
    "Artifact",
    "CACHE_ENV",
    "CHUNK",
    "DEFAULT_DEST",
    "DEFAULT_INDEX",
    "DEFAULT_LOCK",
    "DEFAULT_SEEDS",
    "HashMismatch",
    "INDEX_ENV",
    "IndexFile",
    "IndexProject",
    "LOCK_ENV",
    "PEP691_ACCEPT",
    "SEED_ENV",
    "USER_AGENT",
    "UpstreamError",
    "default_dest",
    "describe_release",
    "download",
    "ensure_file",
    "fetch_artifact",
    "fetch_index",
    "get_artifact",
    "index_url",
    "load_lock",
    "lock_path",
    "log",
    "main",
    "seed_dirs",
    "sha256_file",
    "upstream_version",
    "verify_artifacts",
    "verify_file",
]
