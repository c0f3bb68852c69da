"""Upstream vLLM's own tests, from the pinned sdist, as an oracle for the patched tree.

The sdist (``upstream.lock``) carries vLLM's ``tests/``.  This script copies the
part a suite needs out of it, gives the model ids those tests name local
folders (vLLM's ``VLLM_MODEL_REDIRECT_PATH`` map), runs pytest offline against
whatever ``vllm`` an interpreter imports, and compares the failures with the
list stock vLLM fails (``tests/upstream/known_failures.txt``).

Usage::

    python -m proxima_tools.upstream_tests prepare [--suite tests/v1/core ...] [--all] [--no-extras]
    python -m proxima_tools.upstream_tests run --mode on|off --junit OUT.xml
        [--profile full|patched] [--suite PATH ...] [--python PY] [--timeout S] [-- PYTEST_ARGS]
    python -m proxima_tools.upstream_tests compare --mode on|off --junit OUT.xml
    python -m proxima_tools.upstream_tests baseline [--python STOCK_PY] [--reuse]  # rewrites it

``prepare`` needs ``transformers`` and ``torch`` (it writes the model configs with
transformers' config classes and one tiny set of weights), so run it with a venv's
interpreter; it also installs torchvision into ``.cache/upstream-tests/site`` (PyPI, once).
``run`` starts pytest in ``.cache/upstream-tests`` with ``PYTHONPATH`` set to that
``site`` folder only, so ``import vllm`` finds the interpreter's installed wheel, never a
source tree.  See docs/upstream/tests.md.

Exit status of ``run``: pytest's (124 when out of time).  Of ``compare``: 0 when every
failure is in the known list for the mode, 1 otherwise.  Of ``baseline``: 0, or 2 for a
broken run.
"""

from __future__ import annotations

from proxima_tools.upstream_tests.cli import (
    main,
)
from proxima_tools.upstream_tests.common import (
    DEFAULT_SUITE,
    DEFAULT_TIMEOUT_S,
    EXTRACTED_SEED,
    HUB_CACHE,
    KNOWN_FAILURES,
    MANIFEST,
    MODEL_MAP,
    MODES,
    PER_TEST_TIMEOUT_S,
    PROFILES,
    RUN_ENV,
    STOCK_PYTHON,
    TINY_MODEL,
    WORKDIR,
    Profile,
    log,
)
from proxima_tools.upstream_tests.models import (
    MODEL_SPECS,
    ModelSpec,
    model_ids_named,
    write_hub_cache,
    write_models,
)
from proxima_tools.upstream_tests.prepare import (
    EXTRAS_DIR,
    TORCHVISION_FOR_TORCH,
    install_extras,
    prepare,
)
from proxima_tools.upstream_tests.results import (
    KNOWN_CAUSES,
    Comparison,
    KnownFailures,
    Results,
    compare,
    read_junit,
    write_known_failures,
)
from proxima_tools.upstream_tests.run import (
    run_env,
    run_pytest,
)
from proxima_tools.upstream_tests.source import (
    TestsSource,
    minimal_file_set,
)

__all__ = [
    "Comparison",
    "DEFAULT_SUITE",
    "DEFAULT_TIMEOUT_S",
    "EXTRACTED_SEED",
    "EXTRAS_DIR",
    "HUB_CACHE",
    "KNOWN_CAUSES",
    "KNOWN_FAILURES",
    "KnownFailures",
    "MANIFEST",
    "MODEL_MAP",
    "MODEL_SPECS",
    "MODES",
    "ModelSpec",
    "PER_TEST_TIMEOUT_S",
    "PROFILES",
    "Profile",
    "RUN_ENV",
    "Results",
    "STOCK_PYTHON",
    "TINY_MODEL",
    "TORCHVISION_FOR_TORCH",
    "TestsSource",
    "WORKDIR",
    "compare",
    "install_extras",
    "log",
    "main",
    "minimal_file_set",
    "model_ids_named",
    "prepare",
    "read_junit",
    "run_env",
    "run_pytest",
    "write_hub_cache",
    "write_known_failures",
    "write_models",
]
