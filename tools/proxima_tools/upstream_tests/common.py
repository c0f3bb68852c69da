"""What the upstream test runs share: the work folder, the known-failures list, the environment
of a run, the log line and the profiles (which tests a run selects)."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from proxima_tools import REPO_ROOT

# PROXIMA_UPSTREAM_TESTS_DIR: another work folder, e.g. for the next release's tests
# (scripts/next_upstream.sh, with PROXIMA_UPSTREAM_LOCK naming that release's lock).
WORKDIR = Path(
    os.environ.get("PROXIMA_UPSTREAM_TESTS_DIR") or REPO_ROOT / ".cache" / "upstream-tests"
)


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


_BLAST = "tests/v1/core/test_priority_scheduler_random.py::test_priority_scheduling_blast"


@dataclass(frozen=True)
class Profile:
    """Which of the prepared tests a run selects."""

    paths: tuple[str, ...]
    deselect: tuple[str, ...]
    description: str

    def pytest_args(self, workdir: Path | None = None) -> list[str]:
        """The paths and deselections; with ``workdir``, only the paths that folder's tests
        have (another release may lack a file: scripts/next_upstream.sh), the rest logged."""
        paths = list(self.paths)
        if workdir is not None:
            missing = [p for p in paths if not (workdir / p).exists()]
            if missing and len(missing) < len(paths):  # none there: let pytest say so
                log(f"left out, not in {workdir}: {' '.join(missing)}")
                paths = [p for p in paths if p not in missing]
        return [*paths, *(f"--deselect={node}" for node in self.deselect)]


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
