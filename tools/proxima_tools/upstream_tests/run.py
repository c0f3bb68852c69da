"""``run``: pytest over the prepared suite in a child process, one proxima mode, junit XML out."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from proxima_tools.upstream_tests.common import (
    HUB_CACHE,
    MANIFEST,
    MODEL_MAP,
    PER_TEST_TIMEOUT_S,
    RUN_ENV,
    WORKDIR,
    log,
)
from proxima_tools.upstream_tests.prepare import EXTRAS_DIR, _locked


def run_env(mode: str, workdir: Path = WORKDIR) -> dict[str, str]:
    """The environment a run gets: offline, the model map, the mode, no source tree on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(RUN_ENV)
    env["PROXIMA_MODE"] = mode
    env["VLLM_MODEL_REDIRECT_PATH"] = str(workdir / MODEL_MAP)
    env["HF_HUB_CACHE"] = str(workdir / HUB_CACHE)
    if (workdir / EXTRAS_DIR).is_dir():
        env["PYTHONPATH"] = str(workdir / EXTRAS_DIR)  # torchvision only (install_extras)
    return env


def run_pytest(
    mode: str,
    junit: Path,
    python: str,
    selection: Sequence[str],
    timeout_s: float,
    extra: Sequence[str] = (),
    workdir: Path = WORKDIR,
    output: Path | None = None,
) -> int:
    """Run pytest once on ``selection`` (paths, ``--deselect=`` options).

    Returns pytest's exit status, 124 when it ran out of time.  pytest's output goes to
    ``output`` when given, else to ours.
    """
    if not (workdir / MANIFEST).is_file():
        raise SystemExit(
            f"{workdir} is not prepared: run `python -m proxima_tools.upstream_tests prepare` first"
        )
    junit = junit.resolve()
    if os.sep in python:  # a relative path means one from here, not from the work dir
        python = os.path.abspath(python)  # not resolve(): a venv's python is a symlink
    junit.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider"]
    cmd += [
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        "-o",
        "console_output_style=classic",
    ]
    if _has_module(python, "pytest_timeout"):
        cmd += [f"--timeout={PER_TEST_TIMEOUT_S}"]
    cmd += list(extra)
    shown = [c for c in cmd if not c.startswith("--deselect=")]
    if len(shown) < len(cmd):
        shown.append(f"(+{len(cmd) - len(shown)} --deselect)")
    log(f"PROXIMA_MODE={mode} {' '.join(shown)} (cwd {workdir}, at most {timeout_s:.0f} s)")
    started = time.monotonic()
    with _locked(workdir, exclusive=False):
        rc = _run(cmd, mode, workdir, timeout_s, output)
    log(f"pytest exit {rc} in {time.monotonic() - started:.0f} s")
    return rc


def _run(cmd: list[str], mode: str, workdir: Path, timeout_s: float, output: Path | None) -> int:
    sink = output.open("wb") if output else None
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=run_env(mode, workdir),
        start_new_session=True,
        stdout=sink,
        stderr=subprocess.STDOUT if sink else None,
    )
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log(f"time is up after {timeout_s:.0f} s: stopping pytest")
        rc = 124
    finally:  # also when we are interrupted: pytest runs in its own process group
        _stop(proc)
        if sink:
            sink.close()
    return rc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End pytest's process group (engine tests start subprocesses) if anything is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _has_module(python: str, module: str) -> bool:
    probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0
