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
                          ``vllm/`` (default: the locked sdist, via proxima_tools.upstream)
    PROXIMA_UPSTREAM_LOCK lock file (default ``upstream.lock``)
"""

from __future__ import annotations

from proxima_tools.series.apply import (
    ChangedFile,
    apply_to_target,
    changed_files,
    wheel_notes,
)
from proxima_tools.series.check import (
    check_series,
)
from proxima_tools.series.cli import (
    main,
)
from proxima_tools.series.common import (
    AM_OPTIONS,
    BASE_DATE,
    BASE_IDENTITY,
    DEFAULT_PATCHES,
    DEFAULT_SRC,
    FORMAT_PATCH_OPTIONS,
    PACKAGE,
    PATCHES_ENV,
    REQUIRED_TRAILERS,
    SERIES_FILE,
    SERIES_HEADER,
    SERIES_IDENTITY,
    SUBJECT_MAX,
    UPSTREAM_SRC_ENV,
    SeriesError,
    base_tag,
    git,
    git_env,
    log,
)
from proxima_tools.series.export import (
    export_series,
    new_patch,
)
from proxima_tools.series.patchfile import (
    FileChange,
    PatchInfo,
    parse_changes,
    parse_patch,
    parse_trailers,
)
from proxima_tools.series.seriesfile import (
    Series,
    listed_patches,
    patch_name,
    patches_dir_default,
    read_series,
    render_series,
)
from proxima_tools.series.tree import (
    commit_all,
    import_series,
    populate_tree,
    resolve_upstream_source,
)

__all__ = [
    "AM_OPTIONS",
    "BASE_DATE",
    "BASE_IDENTITY",
    "ChangedFile",
    "DEFAULT_PATCHES",
    "DEFAULT_SRC",
    "FORMAT_PATCH_OPTIONS",
    "FileChange",
    "PACKAGE",
    "PATCHES_ENV",
    "PatchInfo",
    "REQUIRED_TRAILERS",
    "SERIES_FILE",
    "SERIES_HEADER",
    "SERIES_IDENTITY",
    "SUBJECT_MAX",
    "Series",
    "SeriesError",
    "UPSTREAM_SRC_ENV",
    "apply_to_target",
    "base_tag",
    "changed_files",
    "check_series",
    "commit_all",
    "export_series",
    "git",
    "git_env",
    "import_series",
    "listed_patches",
    "log",
    "main",
    "new_patch",
    "parse_changes",
    "parse_patch",
    "parse_trailers",
    "patch_name",
    "patches_dir_default",
    "populate_tree",
    "read_series",
    "render_series",
    "resolve_upstream_source",
    "wheel_notes",
]
