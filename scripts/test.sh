#!/usr/bin/env bash
# The test command (also CI's: .ci/run). Sets everything up (scripts/setup.sh), checks the patch series
# round-trips, lints, type-checks the runtime package (mypy), and runs the whole CPU suite: unit, scheduler
# simulation, engine end-to-end, OpenAI server, wheels, upstream vLLM's own scheduler tests against the
# patched tree, and containers when podman exists.
# GPU tests skip without CUDA (their results are in docs/benchmarks/). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh tests/unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
t0=$(date +%s)
bash scripts/setup.sh
echo "[test] patch series round trip"
PYTHONPATH=tools python3 -m proxima_tools.series check
echo "[test] the series rebased onto the next vLLM releases round trips too (patches/next/, docs/upstream/next.md)"
for lock in patches/next/vllm-*.lock; do
  [ -f "$lock" ] || continue
  PYTHONPATH=tools python3 -m proxima_tools.upstream --lock "$lock" fetch --only sdist
  PYTHONPATH=tools python3 -m proxima_tools.series --lock "$lock" --patches-dir "${lock%.lock}" check
done
echo "[test] ruff"
"$VENV/bin/ruff" check vllm-proxima/src proxima-bench/src tools observability scripts tests
echo "[test] mypy (runtime package; settings in pyproject.toml)"
"$VENV/bin/mypy" vllm-proxima/src/vllm_proxima
echo "[test] pytest"
set +e
# Container tests build images with podman (~10 min, needs podman): opt in with PROXIMA_CONTAINER_TESTS=1.
MARKS=()
if [ "${PROXIMA_CONTAINER_TESTS:-0}" != 1 ]; then MARKS=(-m "not container"); fi
"$VENV/bin/python" -m pytest "${MARKS[@]}" "${@:-tests}"
rc=$?
set -e
echo "[test] done in $(( $(date +%s) - t0 )) s (pytest exit $rc)"
exit $rc
