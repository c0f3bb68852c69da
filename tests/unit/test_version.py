"""One version source: the VERSION file; ``vllm_proxima.__version__`` and the wheel follow it."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import vllm_proxima
from tests.versions import UPSTREAM_VLLM
from vllm_proxima import version_from_wheel

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()


@pytest.mark.parametrize(
    ("wheel", "expected"),
    [
        ("0.26.0+proxima.0.1.0", "0.1.0"),
        ("0.26.0+proxima.0.1.0.cpu", "0.1.0"),
        ("0.26.0+proxima.2.10", "2.10"),
        ("0.26.0", None),  # stock vLLM
        ("0.26.0+cu130", None),
        ("0.26.0+proxima.", None),
    ],
)
def test_version_is_read_back_from_the_wheel_builders_label(
    wheel: str, expected: str | None
) -> None:
    assert version_from_wheel(wheel) == expected


def test_package_version_is_the_version_file() -> None:
    assert vllm_proxima.__version__ == VERSION


def test_installed_wheel_carries_the_version_file_and_vllm_stays_upstream() -> None:
    vllm = pytest.importorskip("vllm")
    try:
        dist_version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm is not installed as a distribution")
    if "+proxima." not in dist_version:
        pytest.skip(f"vllm {dist_version} is not our wheel")
    assert version_from_wheel(dist_version) == VERSION
    assert vllm.__version__ == dist_version.partition("+")[0] == UPSTREAM_VLLM


def test_the_source_defines_no_version_literal() -> None:
    """The version is derived, never typed twice."""
    init = (REPO / "vllm-proxima/src/vllm_proxima/__init__.py").read_text()
    assert f'"{VERSION}"' not in init
