"""Upstream's tests on a release other than the pin (scripts/next_upstream.sh): another work
folder (PROXIMA_UPSTREAM_TESTS_DIR beside PROXIMA_UPSTREAM_LOCK), a profile that leaves out
the files that release lacks, and the patched runs compared with a stock run of the same tests
(``compare --against``) where there is no known-failures file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxima_tools.upstream_tests.common import Profile
from tests.tools.utils import REPO_ROOT, TOOLS, tool_cmd


def tool_env(workdir: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROXIMA_UPSTREAM_TESTS_DIR"}
    env["PYTHONPATH"] = str(TOOLS)
    if workdir is not None:
        env["PROXIMA_UPSTREAM_TESTS_DIR"] = workdir
    return env


def python(code: str, workdir: str | None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=tool_env(workdir),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_default_is_the_pins_folder() -> None:
    code = "from proxima_tools.upstream_tests.common import WORKDIR; print(WORKDIR)"
    assert python(code, None) == str(REPO_ROOT / ".cache" / "upstream-tests")


def test_environment_names_another_folder(tmp_path: Path) -> None:
    code = "from proxima_tools.upstream_tests.common import WORKDIR; print(WORKDIR)"
    assert python(code, str(tmp_path / "next")) == str(tmp_path / "next")


def test_profile_leaves_out_the_files_a_release_lacks(tmp_path: Path) -> None:
    profile = Profile(("t/a.py", "t/b.py"), ("t/a.py::slow",), "two files")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.py").write_text("")
    assert profile.pytest_args() == ["t/a.py", "t/b.py", "--deselect=t/a.py::slow"]
    assert profile.pytest_args(tmp_path) == ["t/a.py", "--deselect=t/a.py::slow"]
    # None there (tests not prepared): all are kept, so pytest says what is missing.
    assert profile.pytest_args(tmp_path / "empty") == profile.pytest_args()


def junit(path: Path, cases: dict[str, str]) -> Path:
    """A pytest junit file: test name -> passed / failed."""
    rows = []
    for name, state in cases.items():
        body = '<failure message="boom"/>' if state == "failed" else ""
        rows.append(f'<testcase classname="tests.test_x" name="{name}">{body}</testcase>')
    path.write_text(f'<testsuites><testsuite time="1.0">{"".join(rows)}</testsuite></testsuites>')
    return path


def compare(tmp_path: Path, run: Path, stock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tool_cmd("upstream_tests"), "compare", "--mode", "on", "--junit", str(run),
         "--against", str(stock)],
        env=tool_env(str(tmp_path)),
        capture_output=True,
        text=True,
    )


def test_compare_against_a_stock_run(tmp_path: Path) -> None:
    stock = junit(tmp_path / "stock.xml", {"a": "passed", "b": "failed", "c": "passed"})
    same = junit(tmp_path / "same.xml", {"a": "passed", "b": "failed", "c": "passed"})
    done = compare(tmp_path, same, stock)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failures also failing on stock (or listed for proxima on): 1" in done.stdout

    worse = junit(tmp_path / "worse.xml", {"a": "failed", "b": "failed", "c": "passed"})
    done = compare(tmp_path, worse, stock)
    assert done.returncode == 1
    assert "NEW FAILURES (not failing on stock): 1" in done.stdout
    assert "tests/test_x.py::a" in done.stdout


def test_compare_refuses_a_broken_stock_run(tmp_path: Path) -> None:
    broken = junit(tmp_path / "stock.xml", {"a": "failed"})
    run = junit(tmp_path / "on.xml", {"a": "failed"})
    done = compare(tmp_path, run, broken)
    assert done.returncode == 2
    assert "passed nothing" in done.stdout + done.stderr
