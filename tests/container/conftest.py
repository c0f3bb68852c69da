"""Container tests (tests/container/): build the CPU image with podman and serve the tiny model.

Marker ``container``; everything here skips cleanly when podman is not installed, or when
``PROXIMA_CONTAINER_TESTS=0``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "container: builds and runs container images (needs podman; skipped without it)"
    )


def podman_global_args() -> list[str]:
    """podman's global options for this host: crun refuses hybrid cgroup v1/v2 hosts, runc copes."""
    runtime = os.environ.get("OCI_RUNTIME", "")
    hybrid = (
        Path("/sys/fs/cgroup/unified").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    )
    if not runtime and hybrid and shutil.which("runc"):
        runtime = "runc"
    return ["--runtime", runtime] if runtime else []


@pytest.fixture(scope="session")
def podman() -> list[str]:
    """The podman command line to use (skips the test when podman is missing or tests are off)."""
    if os.environ.get("PROXIMA_CONTAINER_TESTS", "1") == "0":
        pytest.skip("container tests turned off (PROXIMA_CONTAINER_TESTS=0)")
    exe = shutil.which("podman")
    if exe is None:
        pytest.skip("podman not installed (apt-get install -y podman buildah debootstrap runc)")
    return [exe, *podman_global_args()]
