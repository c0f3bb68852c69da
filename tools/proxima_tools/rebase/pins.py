"""A release's pins (torch, triton, CUDA, Python) from its sdist and torch's own metadata: a clean
apply onto a release with a new torch is still a different product."""

from __future__ import annotations

import json
import re
import tarfile
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

from proxima_tools import upstream
from proxima_tools.rebase.common import log

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
