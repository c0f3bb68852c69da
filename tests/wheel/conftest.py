"""Pytest configuration for the wheel tests (tests/wheel/)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wheel: slow test that installs a built wheel into a fresh virtual environment",
    )
