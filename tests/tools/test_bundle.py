"""The offline bundle (proxima_tools.bundle + its install_bundle.sh).

Fast tests (no marker) check the pure helpers. The ``wheel`` tests make a real bundle of our CPU
wheel with ``--exclude-torch --split-mb`` (about 560 MB, downloaded from the index once per run),
install it into an empty venv with no index (the venv sees only ``.venv``'s torch, triton and
NVIDIA wheels, through a ``.pth`` to a folder of links), and check that a corrupted, missing or
re-summed part is refused before pip runs. Needs ``dist/``'s CPU wheel (``scripts/setup.sh`` makes
it) and ``.venv`` with torch 2.11.0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxima_tools import bundle as ob
from tests.tools.utils import tool_cmd

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
CPU_WHEEL = REPO / "dist" / f"vllm-0.26.0+proxima.{VERSION}.cpu-cp38-abi3-manylinux_2_28_x86_64.whl"
BASE_VENV = Path(os.environ.get("PROXIMA_BASE_VENV", REPO / ".venv"))
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
SPLIT_MB = 64


# --- helpers


def test_glibc_floor_takes_the_most_demanding_wheel() -> None:
    names = [
        "a-1-py3-none-any.whl",
        "b-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "c-1-cp39-abi3-manylinux_2_31_x86_64.whl",
        "d-1-cp311-cp311-manylinux1_x86_64.whl",
    ]
    assert ob.glibc_floor(names) == "2.31"
    assert ob.glibc_floor(names[:2]) == "2.17"
    assert ob.glibc_floor(["x-1-py3-none-any.whl"]) == "2.5"


def test_exclusions_follow_torch_s_runtime_only() -> None:
    def pin(name: str, *requires: str) -> ob.Pinned:
        url = f"https://x/{name}-1-py3-none-any.whl"
        return ob.Pinned(name, "1", url, "0" * 64, requires, requested=name == "vllm")

    pins = [
        pin("vllm", "torch==2.11.0", "nvidia-cutlass-dsl[cu13]==4.6.0", "nvidia-ml-py",
            "torchvision==0.26.0", "sympy", "cuda-python"),
        pin("cuda-python", "cuda-bindings~=13.4.4"),
        pin("cuda-bindings"),
        pin("torch", "sympy", "triton==3.6.0; platform_system == 'Linux'",
            "cuda-toolkit[cublas]==13.0.2; platform_system == 'Linux'", "cuda-bindings",
            "nvidia-cudnn-cu13; sys_platform == 'win32'", "filelock"),
        pin("cuda-toolkit", "nvidia-cublas; extra == 'cublas'",
            "nvidia-cuda-nvcc; extra == 'nvcc'"),
        pin("nvidia-cublas"), pin("nvidia-cuda-nvcc"), pin("triton"), pin("sympy"), pin("filelock"),
        pin("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-cu13; extra == 'cu13'"),
        pin("nvidia-cutlass-dsl-libs-cu13"), pin("nvidia-ml-py"), pin("torchvision", "torch"),
        pin("nvidia-cudnn-cu13"),
    ]  # fmt: skip
    # cuda-bindings: torch needs it, but so does cuda-python (at a version the host may lack)
    assert ob.torch_runtime(pins, "3.11") == {"torch", "triton", "cuda-toolkit", "nvidia-cublas"}
    # no torch in the set: nothing to leave out
    assert ob.torch_runtime([p for p in pins if p.name != "torch"], "3.11") == set()


def test_platform_args_list_every_manylinux_tag_down_to_2_5() -> None:
    args = ob.platform_args("3.11", "2.31")
    plats = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert plats[0] == "manylinux_2_31_x86_64" and "manylinux_2_5_x86_64" in plats
    assert "manylinux2014_x86_64" in plats and "manylinux_2_32_x86_64" not in plats
    assert args[args.index("--python-version") + 1] == "3.11" and "--only-binary=:all:" in args
    with pytest.raises(ob.BundleError):
        ob.platform_args("3.11", "1.9")


def test_split_file_round_trips(tmp_path: Path) -> None:
    data = os.urandom(5 * 1024 + 17)
    f = tmp_path / "payload.tar"
    f.write_bytes(data)
    parts = ob.split_file(f, 1024)
    assert [p.name for p in parts] == [f"payload.tar.part-{i:03d}" for i in range(6)]
    assert all(p.stat().st_size <= 1024 for p in parts) and not f.exists()
    assert b"".join(p.read_bytes() for p in parts) == data


def test_missing_wheel_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            *tool_cmd("bundle"),
            "--variant",
            "cpu",
            "--wheel",
            str(tmp_path / "nope.whl"),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "offline_bundle: error:" in proc.stderr and "nope.whl not found" in proc.stderr


# --- a real bundle (slow)


def _torch_links(dest: Path) -> Path | None:
    """A folder of links to ``.venv``'s torch, triton and NVIDIA/CUDA packages."""
    sites = sorted(BASE_VENV.glob("lib/python3.*/site-packages"))
    if not sites or not (sites[0] / "torch").is_dir() or sites[0].parent.name != f"python{PY}":
        return None
    site = sites[0]
    dest.mkdir()
    for entry in site.iterdir():
        name = entry.name.split("-")[0].lower()
        if name in {"torch", "functorch", "torchgen", "triton", "nvidia", "cuda"} or (
            entry.name.endswith(".dist-info") and ob.TORCH_RUNTIME.match(ob.canonical(name))
        ):
            (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not CPU_WHEEL.is_file():
        pytest.skip(f"{CPU_WHEEL.name} not built (bash scripts/setup.sh)")
    out = tmp_path_factory.mktemp("bundles")
    proc = subprocess.run(
        [
            *tool_cmd("bundle"),
            "--variant",
            "cpu",
            "--exclude-torch",
            "--split-mb",
            str(SPLIT_MB),
            "--python-version",
            PY,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.is_dir() and path.parent == out
    return path


@pytest.fixture()
def torch_venv(tmp_path: Path) -> Iterator[Path]:
    links = _torch_links(tmp_path / "torch-site")
    if links is None:
        pytest.skip(f"{BASE_VENV} has no torch for Python {PY}")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / "lib" / f"python{PY}" / "site-packages" / "_torch_only.pth").write_text(f"{links}\n")
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


def env_field(bundle: Path, key: str) -> str:
    for line in (bundle / "bundle.env").read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    raise KeyError(key)


def install(bundle: Path, venv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "bash",
            str(bundle / "install.sh"),
            "--venv",
            str(venv),
            "--python",
            sys.executable,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )


def copy_bundle(bundle: Path, dest: Path) -> Path:
    """A copy whose files are hard links (cheap); replace a file before changing it."""
    shutil.copytree(bundle, dest, copy_function=os.link)
    return dest


def has_vllm(venv: Path) -> bool:
    return any(venv.glob("lib/python3.*/site-packages/vllm"))


@pytest.mark.wheel
@pytest.mark.timeout(1800)
def test_bundle_layout(bundle: Path) -> None:
    assert env_field(bundle, "VLLM_VERSION") == f"0.26.0+proxima.{VERSION}.cpu"
    assert env_field(bundle, "EXCLUDE_TORCH") == "1" and env_field(bundle, "PYTHON_VERSION") == PY
    excluded = env_field(bundle, "EXCLUDED").split()
    # torch and the NVIDIA wheels only it needs (triton stays: other packages require it too)
    assert "torch" in excluded and any(n.startswith("nvidia-") for n in excluded)
    parts = env_field(bundle, "PARTS").split()
    assert len(parts) >= 2 and not (bundle / "wheels").exists()
    assert all((bundle / p).stat().st_size <= SPLIT_MB << 20 for p in parts)
    listed = {ln.split("  ", 1)[1] for ln in (bundle / "SHA256SUMS").read_text().splitlines()}
    assert listed == {p.name for p in bundle.iterdir() if p.name != "SHA256SUMS"}
    subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=bundle, check=True)
    reqs = (bundle / "requirements.txt").read_text()
    assert f"vllm==0.26.0+proxima.{VERSION}.cpu\n" in reqs and "\ntorch==" not in reqs
    # the joined parts are a tar of exactly the wheels requirements.txt pins
    joined = bundle.parent / "joined.tar"
    with joined.open("wb") as out:
        for p in parts:
            out.write((bundle / p).read_bytes())
    with tarfile.open(joined) as tf:
        wheels = [m.name for m in tf.getmembers() if m.isfile()]
    joined.unlink()
    assert len(wheels) == int(env_field(bundle, "WHEEL_COUNT"))
    assert f"wheels/{CPU_WHEEL.name}" in wheels
    in_bundle = {ob.canonical(Path(w).name.split("-")[0]) for w in wheels}
    assert not in_bundle & {ob.canonical(n) for n in excluded}
    pinned = {ln.split("==")[0].lower().replace("_", "-") for ln in reqs.splitlines()[1:]}
    assert len(pinned) == len(wheels)


@pytest.mark.wheel
@pytest.mark.timeout(1800)
def test_installs_offline_into_an_empty_venv(bundle: Path, torch_venv: Path) -> None:
    proc = install(bundle, torch_venv)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == f"installed 0.26.0+proxima.{VERSION}.cpu"
    py = str(torch_venv / "bin" / "python")
    out = subprocess.run(
        [
            py,
            "-c",
            (
                "import importlib.metadata as m, vllm, vllm_proxima, vllm_proxima.kv;"
                "print(m.version('vllm'), vllm.__version__, m.version('fastapi'))"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[:2] == [f"0.26.0+proxima.{VERSION}.cpu", "0.26.0"]
    # fastapi came from the bundle (the pinned version), not from .venv (only torch & co. are seen)
    lock = (REPO / "requirements" / "cpu.lock").read_text()
    assert f"fastapi=={out[2]}" in lock
    site = next(torch_venv.glob("lib/python3.*/site-packages"))
    assert (site / "fastapi").is_dir() and not (site / "torch").exists()
    # the vllm CLI runs and detects the CPU platform
    cli = subprocess.run(
        [str(torch_venv / "bin" / "vllm"), "--version"], capture_output=True, text=True
    )
    assert cli.returncode == 0 and cli.stdout.strip().endswith(".cpu"), cli.stderr[-2000:]
    plat = subprocess.run(
        [py, "-c", "from vllm.platforms import current_platform as p; print(p.device_type)"],
        capture_output=True,
        text=True,
    )
    assert plat.stdout.strip().splitlines()[-1] == "cpu", plat.stderr[-2000:]


@pytest.mark.wheel
@pytest.mark.timeout(1800)
def test_corrupted_part_is_refused(bundle: Path, tmp_path: Path) -> None:
    copy = copy_bundle(bundle, tmp_path / "b")
    part = copy / env_field(bundle, "PARTS").split()[1]
    data = bytearray(part.read_bytes())
    part.unlink()  # break the hard link before changing the bytes
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    venv = tmp_path / "venv"
    proc = install(copy, venv)
    assert proc.returncode == 1
    assert f"{part.name}: FAILED" in proc.stderr and "corrupt" in proc.stderr
    assert not venv.exists()  # refused before anything was made
    verify = subprocess.run(
        ["bash", str(copy / "install.sh"), "--verify-only"], capture_output=True, text=True
    )
    assert verify.returncode == 1 and "refusing" in verify.stderr


@pytest.mark.wheel
@pytest.mark.timeout(1800)
def test_missing_part_and_resummed_part_are_refused(bundle: Path, tmp_path: Path) -> None:
    parts = env_field(bundle, "PARTS").split()
    missing = copy_bundle(bundle, tmp_path / "missing")
    (missing / parts[-1]).unlink()
    proc = install(missing, tmp_path / "venv1")
    assert proc.returncode == 1 and parts[-1] in proc.stderr and "refusing" in proc.stderr

    # A part changed *and* SHA256SUMS rewritten to match: the joined tar's sha256 still catches it.
    resummed = copy_bundle(bundle, tmp_path / "resummed")
    part = resummed / parts[0]
    data = bytearray(part.read_bytes())
    part.unlink()
    data[-1] ^= 0x01
    part.write_bytes(bytes(data))
    ob.write_sha256sums(resummed)
    proc = install(resummed, tmp_path / "venv2")
    assert proc.returncode == 1 and "joined wheels.tar has sha256" in proc.stderr
    assert not has_vllm(tmp_path / "venv2")


@pytest.mark.wheel
@pytest.mark.timeout(1800)
def test_bundle_without_torch_needs_torch_in_the_venv(bundle: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    proc = install(bundle, venv)
    assert proc.returncode == 1
    assert "has no torch" in proc.stderr and "install torch 2.11.0 first" in proc.stderr
    assert not has_vllm(venv)
