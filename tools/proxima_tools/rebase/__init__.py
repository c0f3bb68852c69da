"""Probe how the patch series would rebase onto vLLM releases after the pin.

For every final vLLM release newer than ``upstream.lock``'s version (read from
PyPI's PEP 691 index, pre-releases skipped) the probe downloads the sdist,
commits its ``vllm/`` tree on top of our upstream base in one git repository,
and tries each patch in series order:

* ``applied``        ``git am`` applies it as is (offsets allowed, no fuzz);
* ``applied-3way``   ``git am -3`` merges it using the base blobs;
* ``applied-merge``  a rename-aware ``git cherry-pick`` of our commit merges it;
* ``upstreamed``     the change is already in the release (patch can go);
* ``conflict``       none of the above; the report keeps the rejected hunks.

It also reports how the release's pins moved (torch, triton, CUDA, Python,
...) against ours: a series that applies cleanly can still be a different
product once torch moves.  Results go to ``docs/upstream/rebase-report.md``
and ``docs/upstream/rebase-report.json``.

Usage::

    python -m proxima_tools.rebase [--versions 0.27.0 0.28.0] [--limit N] [--run-tests]
"""

from __future__ import annotations

from proxima_tools.rebase.apply import (
    import_release,
    overall_status,
    try_patch,
    upstream_touched,
)
from proxima_tools.rebase.cli import (
    main,
)
from proxima_tools.rebase.common import (
    APPLIED_STATES,
    CPU_PROJECT,
    DEFAULT_OUT,
    DEFAULT_TEST_COMMAND,
    DEFAULT_WORK,
    MAX_DETAIL_LINES,
    MAX_HUNK_LINES,
    PROJECT,
    PatchResult,
    ProbeError,
    ReleaseResult,
    log,
    releases_after,
    version_key,
)
from proxima_tools.rebase.pins import (
    PIN_LABELS,
    TorchMetadata,
    read_pins,
)
from proxima_tools.rebase.probe import (
    probe,
    run_cpu_tests,
)
from proxima_tools.rebase.report import (
    SUMMARY_COLUMNS,
    SUMMARY_PINS,
    render_markdown,
)

__all__ = [
    "APPLIED_STATES",
    "CPU_PROJECT",
    "DEFAULT_OUT",
    "DEFAULT_TEST_COMMAND",
    "DEFAULT_WORK",
    "MAX_DETAIL_LINES",
    "MAX_HUNK_LINES",
    "PIN_LABELS",
    "PROJECT",
    "PatchResult",
    "ProbeError",
    "ReleaseResult",
    "SUMMARY_COLUMNS",
    "SUMMARY_PINS",
    "TorchMetadata",
    "import_release",
    "log",
    "main",
    "overall_status",
    "probe",
    "read_pins",
    "releases_after",
    "render_markdown",
    "run_cpu_tests",
    "try_patch",
    "upstream_touched",
    "version_key",
]
