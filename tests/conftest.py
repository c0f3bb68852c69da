"""Repository-wide test set-up: offline, loopback-only, deterministic vLLM runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

for key, value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TORCH_COMPILE_DISABLE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(key, value)

if str(REPO) not in sys.path:  # `tests.*` helpers
    sys.path.insert(0, str(REPO))

# The benchmarks (tests/bench, the fault harness) import proxima_bench, its own
# distribution: scripts/setup.sh installs it (editable); on a plain checkout the
# source folder stands in, for this process and the bench CLIs the tests start.
try:
    import proxima_bench  # noqa: F401
except ImportError:
    BENCH_SRC = str(REPO / "proxima-bench" / "src")
    sys.path.insert(0, BENCH_SRC)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (BENCH_SRC, os.environ.get("PYTHONPATH")) if p
    )


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; GPU results are in docs/benchmarks/")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
