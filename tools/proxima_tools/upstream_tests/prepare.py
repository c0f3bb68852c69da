"""``prepare``: copy the suite out of the sdist, write its models, install the extras it needs
(torchvision) beside it, under a lock so parallel runs share one work folder."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from proxima_tools import upstream
from proxima_tools.upstream_tests.common import HUB_CACHE, MANIFEST, MODEL_MAP, WORKDIR, log
from proxima_tools.upstream_tests.models import (
    MODEL_SPECS,
    model_ids_named,
    write_hub_cache,
    write_models,
)
from proxima_tools.upstream_tests.source import TestsSource, _sdist_pytest_ini, minimal_file_set

# torchvision matching each torch minor release (torch's own release notes pair them).
TORCHVISION_FOR_TORCH = {"2.11": "0.26.0", "2.13": "0.28.0"}  # 2.13: vLLM 0.27 (next.md)


EXTRAS_DIR = "site"


def install_extras(workdir: Path, python: str = sys.executable) -> str | None:
    """Install torchvision (no dependencies) into ``workdir/site`` for the runs' PYTHONPATH.

    Our requirements leave torchvision out (text serving does not need it), but
    transformers' Qwen2-VL image processor imports it, and test_priority_scheduler_random
    builds that processor.  Returns the version installed or found, None when not possible.
    """
    site = workdir / EXTRAS_DIR
    probe = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    torch_minor = ".".join(probe.stdout.strip().split("+")[0].split(".")[:2])
    wanted = TORCHVISION_FOR_TORCH.get(torch_minor)
    if wanted is None:
        log(
            f"no torchvision known for torch {probe.stdout.strip() or '?'}; tests that need it fail"
        )
        return None
    if list(site.glob(f"torchvision-{wanted}.dist-info")):
        return wanted
    shutil.rmtree(site, ignore_errors=True)
    cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    cmd += [f"torchvision=={wanted}"]
    log(f"installing torchvision {wanted} into {site} (for the runs only)")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        log(f"could not install torchvision: {done.stderr.strip()[-500:]}")
        shutil.rmtree(site, ignore_errors=True)
        return None
    return wanted


@contextlib.contextmanager
def _locked(workdir: Path, exclusive: bool) -> Iterator[None]:
    """``prepare`` rewrites the folder (exclusive); runs read it (shared), possibly several."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir.parent / f".{workdir.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare(
    suite: Sequence[str], copy_all: bool, extras: bool = True, workdir: Path = WORKDIR
) -> dict[str, Any]:
    """Write ``workdir``: the sdist's tests (minimal set or all), pytest.ini, models, the map."""
    with _locked(workdir, exclusive=True):
        return _prepare(suite, copy_all, extras, workdir)


def _prepare(suite: Sequence[str], copy_all: bool, extras: bool, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    source = TestsSource.locate()
    if source is None:
        art = upstream.get_artifact("sdist")
        log(f"{art.filename} is not in .cache; fetching it (proxima_tools.upstream)")
        source = TestsSource.from_tarball(upstream.fetch_artifact("sdist"))
    paths = sorted(source.files) if copy_all else minimal_file_set(source, suite)
    tests_dir = workdir / "tests"
    shutil.rmtree(tests_dir, ignore_errors=True)
    for path in paths:
        target = workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.files[path])
    (workdir / "pytest.ini").write_text(_sdist_pytest_ini(source))
    mapping = write_models(workdir / "models", MODEL_SPECS)
    torchvision = install_extras(workdir) if extras else None
    (workdir / MODEL_MAP).write_text(json.dumps(mapping, indent=2, sort_keys=True) + "\n")
    write_hub_cache(workdir / HUB_CACHE, mapping)
    unmapped = sorted(model_ids_named(source.files, suite) - set(mapping))
    size = sum(len(source.files[p]) for p in paths)
    manifest: dict[str, Any] = {
        "source": source.origin,
        "sdist_version": upstream.get_artifact("sdist").version,
        "suite": list(suite),
        "copied": "all" if copy_all else "minimal",
        "files": len(paths),
        "bytes": size,
        "models": mapping,
        "unmapped_model_ids": unmapped,
        "torchvision": torchvision,
        "seconds": round(time.monotonic() - started, 2),
    }
    (workdir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    log(
        f"prepared {workdir}: {len(paths)} files ({size / 1e6:.1f} MB) from "
        f"{source.origin}, {len(mapping)} models mapped, {manifest['seconds']} s"
    )
    if unmapped:
        log(f"model ids named by the tests without a local folder: {', '.join(unmapped)}")
    return manifest
