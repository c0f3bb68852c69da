import pytest

from tests.engine.utils import MODEL


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if (MODEL / "config.json").exists():
        return
    skip = pytest.mark.skip(reason="tiny model missing: run python -m proxima_tools.tiny_model")
    for item in items:
        if "tests/engine" in str(item.fspath):
            item.add_marker(skip)
