"""The upstream-tests work folder: the pin's by default, another one for the next release's tests
(scripts/next_upstream.sh sets PROXIMA_UPSTREAM_TESTS_DIR beside PROXIMA_UPSTREAM_LOCK)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.tools.utils import REPO_ROOT, TOOLS


def workdir_with(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PROXIMA_UPSTREAM_TESTS_DIR"}
    env["PYTHONPATH"] = str(TOOLS)
    if env_value is not None:
        env["PROXIMA_UPSTREAM_TESTS_DIR"] = env_value
    code = "from proxima_tools.upstream_tests.common import WORKDIR; print(WORKDIR)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_default_is_the_pins_folder() -> None:
    assert workdir_with(None) == str(REPO_ROOT / ".cache" / "upstream-tests")


def test_environment_names_another_folder(tmp_path: Path) -> None:
    assert workdir_with(str(tmp_path / "next")) == str(tmp_path / "next")
