#!/usr/bin/env bash
# Nightly run of the token layout's stateful property tests (tests/unit/test_invariants_stateful.py)
# at 10^6 operations in total: PROXIMA_INVARIANT_OPS per state machine (default 500000) for the
# SlotPool machine and the ProximaKVCacheManager machine, with fresh random seeds each night (CI runs
# the same tests at 30 x 50 steps, derandomized). About 12-15 minutes on a 2-core machine
# (measured: ~3,400 SlotPool and ~870 manager operations per second). A failure prints Hypothesis'
# shrunk sequence of operations, which replays as a unit test.
#   bash scripts/nightly_invariants.sh            # 2 x 500,000 operations
#   OPS=50000 bash scripts/nightly_invariants.sh  # a shorter run
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PROXIMA_INVARIANT_OPS=${OPS:-500000}
export PYTHONPATH="$PWD/vllm-proxima/src${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
echo "[nightly-invariants] $PROXIMA_INVARIANT_OPS operations per state machine"
"$VENV/bin/python" -m pytest tests/unit/test_invariants_stateful.py -k stateful -s -q -p no:cacheprovider \
  -o timeout=0 --durations=0
echo "[nightly-invariants] done in $(( $(date +%s) - t0 )) s"
