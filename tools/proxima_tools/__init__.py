"""proxima-vllm's release and maintenance tools: the upstream lock, the patch series, wheels,
rebase probes, offline bundles, upstream's test runs and the embedded tiny model.

Each tool is a module with a thin command line, ``python -m proxima_tools.<tool> --help``, run
with ``tools/`` on ``PYTHONPATH`` (``scripts/setup.sh`` and the tests set it). The tools work on the
repository they live in: ``REPO_ROOT`` is the checkout that holds ``tools/``.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
