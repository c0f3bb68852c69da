"""Upstream vLLM's tests/v1/core, from the pinned sdist, against the installed (patched) vLLM.

Two runs, ``PROXIMA_MODE=off`` and ``PROXIMA_MODE=on``, each in a fresh pytest process
started by ``proxima_tools.upstream_tests`` (offline, local model configs).  The bar: every
failure is one stock vLLM has too (``tests/upstream/known_failures.txt``), or, with proxima
on, one listed there with the reason it is expected to differ.

``PROXIMA_UPSTREAM_PROFILE`` picks the tests: ``patched`` (default: the upstream tests that
run code of the files our patches touch, ~4 min a mode on 2 cores) or ``full`` (all of
tests/v1/core, ~13 min a mode).  See docs/upstream/tests.md.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from proxima_tools import upstream
from proxima_tools import upstream_tests as ut
from tests.upstream.conftest import SUMMARY

REPO = Path(__file__).resolve().parents[2]


pytestmark = [pytest.mark.upstream, pytest.mark.timeout(2 * ut.DEFAULT_TIMEOUT_S)]

PROFILE_ENV = "PROXIMA_UPSTREAM_PROFILE"
DEFAULT_PROFILE = "patched"


def _profile() -> ut.Profile:
    name = os.environ.get(PROFILE_ENV, DEFAULT_PROFILE)
    if name not in ut.PROFILES:
        raise pytest.UsageError(f"{PROFILE_ENV}={name!r}: choose one of {sorted(ut.PROFILES)}")
    return ut.PROFILES[name]


@pytest.fixture(scope="module")
def prepared() -> Path:
    """The sdist's tests copied out, models and the redirect map written (once a session)."""
    if importlib.util.find_spec("vllm_proxima") is None:
        pytest.skip(f"{sys.executable} has no vllm_proxima: install our wheel (scripts/setup.sh)")
    if ut.TestsSource.locate() is None:
        art = upstream.get_artifact("sdist")
        pytest.skip(
            f"the pinned sdist {art.filename} is not in .cache "
            f"(python3 -m proxima_tools.upstream fetch --only sdist)"
        )
    manifest = ut.prepare(ut.DEFAULT_SUITE, copy_all=False)
    if manifest["torchvision"] is None:
        pytest.fail(
            "torchvision could not be installed into .cache/upstream-tests/site (prepare needs "
            "PyPI once); test_priority_scheduler_random needs it, so the runs would not compare"
        )
    return ut.WORKDIR


@pytest.fixture(scope="module")
def known() -> ut.KnownFailures:
    return ut.KnownFailures.load()


class Runs:
    """Each mode's run, made on first use and kept for the module."""

    def __init__(self, workdir: Path, out: Path) -> None:
        self.workdir = workdir
        self.out = out
        self.profile = _profile()
        self._results: dict[str, ut.Results] = {}

    def prefetch(self, modes: Sequence[str]) -> None:
        """Run ``modes`` side by side (one pytest process each; on CI's 2 cores the two
        ~4-minute runs then take about as long as one)."""
        todo = [m for m in modes if m not in self._results]
        if len(todo) > 1:
            with ThreadPoolExecutor(len(todo)) as pool:
                list(pool.map(self.get, todo))

    def get(self, mode: str) -> ut.Results:
        if mode not in self._results:
            junit = self.out / f"upstream-{mode}.xml"
            output = self.out / f"upstream-{mode}.log"
            rc = ut.run_pytest(
                mode,
                junit,
                sys.executable,
                self.profile.pytest_args(),
                ut.DEFAULT_TIMEOUT_S,
                workdir=self.workdir,
                output=output,
            )
            tail = output.read_text(errors="replace")[-3000:]
            # 0: all passed; 1: some failed. Anything else (124: out of time, 2: interrupted,
            # 3: internal error, 4: usage, 5: nothing collected) means the run itself broke.
            assert rc in (0, 1) and junit.is_file(), f"pytest exit {rc}; its output ends:\n{tail}"
            self._results[mode] = ut.read_junit(junit, self.workdir)
        return self._results[mode]


def _selected_modes(items: Sequence[pytest.Item]) -> list[str]:
    """The modes the selected tests of this module will ask for."""
    modes: set[str] = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ != __name__:
            continue
        name = getattr(item, "originalname", item.name)
        if name == "test_proxima_on_differs_only_where_listed":
            modes |= {"off", "on"}
        elif name == "test_no_failure_that_stock_does_not_have":
            modes.add(item.callspec.params["mode"])  # type: ignore[attr-defined]
    return sorted(modes)


@pytest.fixture(scope="module")
def runs(
    prepared: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Runs]:
    made = Runs(prepared, tmp_path_factory.mktemp("upstream"))
    made.prefetch(_selected_modes(request.session.items))
    yield made


@pytest.mark.parametrize("mode", ["off", "on"])
def test_no_failure_that_stock_does_not_have(
    runs: Runs, known: ut.KnownFailures, mode: str
) -> None:
    results = runs.get(mode)
    comparison = ut.compare(mode, results, known)
    SUMMARY[mode] = comparison.report()
    print(comparison.report())

    assert results.total > 0, "no upstream test ran"
    # Nothing listed for the selected files vanished: a collection error or a rename upstream
    # would otherwise shrink the run silently.
    ran = set(results.passed) | set(results.failed) | set(results.skipped)
    selected = [
        node
        for node in known.allowed(mode)
        if node.split("::")[0].startswith(runs.profile.paths)
        and not any(node.startswith(d) for d in runs.profile.deselect)
    ]
    missing = [node for node in selected if node not in ran]
    assert not missing, f"listed tests that did not run: {missing}"
    assert comparison.ok, comparison.report()


def test_proxima_on_differs_only_where_listed(runs: Runs, known: ut.KnownFailures) -> None:
    """With proxima on, exactly the listed tests change outcome; each has a reason."""
    off, on = runs.get("off"), runs.get("on")
    assert set(off.passed) | set(off.failed) == set(on.passed) | set(on.failed), (
        "the two modes ran different tests"
    )
    newly_failing = sorted(set(on.failed) - set(off.failed))
    listed = {
        node: why
        for node, why in known.proxima_on.items()
        if node.split("::")[0].startswith(runs.profile.paths)
    }
    assert all(listed.values()), "every proxima-on entry needs a reason"
    assert newly_failing == sorted(listed), (
        f"failing with proxima on only: {newly_failing}; listed as expected: {sorted(listed)}"
    )
    # The reverse is as telling: a test stock fails that proxima on passes would mean the
    # scheduler tests do not reach upstream's code path any more.
    assert sorted(set(off.failed) - set(on.failed)) == []


def test_known_failures_file_is_well_formed(known: ut.KnownFailures) -> None:
    """Each entry is a node id of the prepared suite, listed once; proxima-on ones say why."""
    entries = [
        line.split(" # ")[0].removeprefix("on:").strip()
        for line in ut.KNOWN_FAILURES.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(entries) == len(set(entries)), "a node id is listed twice"
    assert all(e.startswith(ut.DEFAULT_SUITE) and ".py::" in e for e in entries), entries
    assert not set(known.stock) & set(known.proxima_on), "listed both as stock and proxima-on"
    assert all(known.proxima_on.values()), "every proxima-on entry needs a reason"
    assert known.stock_total is not None and known.stock_total >= len(known.stock)


def test_directly_built_scheduler_is_upstreams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why upstream's scheduler unit tests agree in both modes.

    They build ``SchedulerConfig``/``VllmConfig`` and ``Scheduler`` directly, never through
    ``EngineArgs.create_engine_config`` (where proxima mode picks its scheduler class), so even
    with ``PROXIMA_MODE=on`` they get upstream's classes, whose four extension points (patch
    ``scheduler_extension_points...``) keep upstream's behaviour.
    """
    pytest.importorskip("vllm_proxima", reason="needs our patched vLLM")
    monkeypatch.setenv("PROXIMA_MODE", "on")
    from types import SimpleNamespace

    from vllm.config import SchedulerConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    for async_scheduling, expected in ((False, Scheduler), (True, AsyncScheduler)):
        config = SchedulerConfig(
            max_model_len=1024, is_encoder_decoder=False, async_scheduling=async_scheduling
        )
        assert config.get_scheduler_cls() is expected

    # The hooks' defaults, called on a stand-in for the scheduler's state.
    hooks: Any = Scheduler
    state = SimpleNamespace(running=["oldest", "middle", "newest"])
    assert hooks._admission_decision(state, None, 16, 0, None) == "admit"
    assert hooks._pop_preemption_victim(state, 0) == "newest"  # FCFS: the newest
    assert state.running == ["oldest", "middle"]
    assert hooks._make_plugin_stats(state) is None
