"""The CPU image, as a user runs it: ``docker/build.sh cpu`` builds it (on the debootstrap base,
since no registry is reachable), ``podman run IMAGE --model /models/tiny ...`` serves the tiny
model, and a completion comes back over HTTP on loopback. The non-root target runs the same way
under an arbitrary UID in group 0 (as OpenShift does). Timings and the image size go to
``.cache/container-test.json``.

The container shares the host's network namespace (``--network host``) and the server listens on
127.0.0.1 only: nothing but loopback is used.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
WHEEL = REPO / "dist" / f"vllm-0.26.0+proxima.{VERSION}.cpu-cp38-abi3-manylinux_2_28_x86_64.whl"
MODEL = REPO / "models" / "tiny-llama"
TIMINGS = REPO / ".cache" / "container-test.json"
SERVER_FLAGS = [
    "--model", "/models/tiny", "--served-model-name", "tiny", "--enforce-eager",
    "--dtype", "float32", "--max-model-len", "1024", "--kv-cache-memory-bytes", str(16 << 20),
]  # fmt: skip
# podman's default rlimits (nofile 1M, nproc 32k) are above what this sandbox lets runc set.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "TORCH_COMPILE_DISABLE": "1",
}

pytestmark = [
    pytest.mark.container,
    # a cold build (no cached layers: ~3 GB of wheels) runs inside the first test
    pytest.mark.timeout(2700),
    pytest.mark.skipif(not WHEEL.is_file(), reason=f"{WHEEL.name} not built (scripts/setup.sh)"),
    pytest.mark.skipif(not (MODEL / "config.json").is_file(), reason="models/tiny-llama missing"),
]

timings: dict[str, float | int | str] = {}


def record(**kw: float | int | str) -> None:
    timings.update(kw)
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS.write_text(json.dumps(timings, indent=2) + "\n")


def build(target: str) -> str:
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", "docker/build.sh", "cpu", "--debootstrap-base", "--target", target],
        capture_output=True, text=True, timeout=2400, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    record(**{f"build_{target}_s": round(time.monotonic() - t0, 1)})
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def image(podman: list[str]) -> str:
    tag = build("openai")
    size = int(subprocess.check_output([*podman, "image", "inspect", "--format", "{{.Size}}", tag]))
    record(image=tag, image_size_mb=size // 1_000_000)
    return tag


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Container:
    """One ``podman run -d`` of an image, on the host network; removed on exit."""

    def __init__(
        self, podman: list[str], image: str, model: Path, args: list[str], run_opts: list[str]
    ) -> None:
        self.podman = podman
        self.name = f"proxima-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = [f"--env={k}={v}" for k, v in ENV.items()]
        cmd = [
            *podman, "run", "-d", "--name", self.name, "--network", "host",
            *LIMITS,
            "-v", f"{model}:/models/tiny:ro", *env, *run_opts,
            image, *args, "--host", "127.0.0.1", "--port", str(self.port),
        ]  # fmt: skip
        self.t0 = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    def logs(self) -> str:
        p = subprocess.run([*self.podman, "logs", self.name], capture_output=True, text=True)
        return "\n".join((p.stdout + p.stderr).splitlines()[-80:])

    def running(self) -> bool:
        p = subprocess.run(
            [*self.podman, "inspect", "--format", "{{.State.Running}}", self.name],
            capture_output=True, text=True,
        )  # fmt: skip
        return p.stdout.strip() == "true"

    def wait_healthy(self, timeout: float = 420) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise AssertionError(f"container exited before it was healthy:\n{self.logs()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - self.t0
            except OSError:
                time.sleep(1)
        raise AssertionError(f"not healthy after {timeout} s:\n{self.logs()}")

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read()

    def post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def remove(self) -> None:
        subprocess.run([*self.podman, "rm", "-f", "-t", "10", self.name], capture_output=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny model that any UID can read: models/ may hold 0600 files, which the
    non-root image's UID could not open (a mounted model must be readable by the container's UID).
    """
    dest = tmp_path_factory.mktemp("model") / "tiny"
    shutil.copytree(MODEL, dest)
    for p in [dest, *dest.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


@pytest.fixture()
def run(podman: list[str], model: Path) -> Iterator:
    started: list[Container] = []

    def start(image: str, args: list[str], run_opts: list[str] | None = None) -> Container:
        c = Container(podman, image, model, args, run_opts or [])
        started.append(c)
        return c

    yield start
    for c in started:
        c.remove()


def completion(c: Container) -> dict:
    out = c.post(
        "/v1/completions",
        {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8,
         "temperature": 0, "ignore_eos": True},
    )  # fmt: skip
    assert out["object"] == "text_completion" and out["model"] == "tiny"
    assert out["usage"]["completion_tokens"] == 8 and out["usage"]["prompt_tokens"] > 0
    choice = out["choices"][0]
    assert isinstance(choice["text"], str) and choice["finish_reason"] == "length"
    return out


def test_cpu_image_serves_the_tiny_model(image: str, run, podman: list[str]) -> None:
    # the wheel inside is ours, and the CLI sees the CPU build
    version = subprocess.run(
        [*podman, "run", "--rm", *LIMITS, "--network", "none",
         "--entrypoint", "vllm", image, "--version"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert version.returncode == 0, version.stderr[-3000:]
    assert version.stdout.strip().splitlines()[-1] == f"0.26.0+proxima.{VERSION}.cpu"

    c = run(image, SERVER_FLAGS)  # `IMAGE --model ...`, as with vllm/vllm-openai
    record(ready_openai_s=round(c.wait_healthy(), 1))
    models = json.loads(c.get("/v1/models"))
    assert [m["id"] for m in models["data"]] == ["tiny"]
    t0 = time.monotonic()
    first = completion(c)
    assert completion(c)["choices"][0]["text"] == first["choices"][0]["text"]  # temperature 0
    record(two_completions_s=round(time.monotonic() - t0, 2))
    metrics = c.get("/metrics").decode()
    assert "vllm:kv_cache_usage_perc" in metrics
    assert "proxima:" in metrics, "the proxima plugin's metrics are missing: plugin not loaded?"


def test_nonroot_image_runs_as_an_arbitrary_uid(image: str, run, podman: list[str]) -> None:
    nonroot = build("nonroot")
    ident = subprocess.run(
        [*podman, "run", "--rm", *LIMITS, "--network", "none", "--entrypoint", "id", nonroot],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ident.returncode == 0 and ident.stdout.startswith("uid=2000(vllm) gid=0(root)"), ident
    # An arbitrary UID that /etc/passwd does not know (OpenShift): the entrypoint gives it a name
    # and a writable HOME, and the server works.
    c = run(nonroot, SERVER_FLAGS, ["--user", "123456:0"])
    record(ready_nonroot_s=round(c.wait_healthy(), 1))
    completion(c)
    who = subprocess.run(
        [*podman, "exec", c.name, "sh", "-c",
         ('id -u; home=$(tr "\\0" "\\n" < /proc/1/environ | sed -n "s/^HOME=//p"); '
          'echo "$home"; test -w "$home" && echo writable')],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    uid, home, writable = who.stdout.split()
    assert (uid, writable) == ("123456", "writable"), who
    assert home.startswith(("/home/vllm", "/tmp/vllm-home.")), who
