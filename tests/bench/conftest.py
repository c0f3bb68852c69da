"""tests/bench: the benchmarks' tests; engine and server ones need the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-llama"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if (MODEL / "config.json").exists():
        return
    skip = pytest.mark.skip(reason="tiny model missing: run python -m proxima_tools.tiny_model")
    for item in items:
        if "tests/bench" in str(item.fspath) and ({"engine", "server"} & set(item.keywords)):
            item.add_marker(skip)
