#!/usr/bin/env bash
# Kept readings of the residents (scheduling/reading.py) in the scheduler simulator: admission
# CPU per step and the scheduling outcome (steps, preemptions, mean running requests) for the
# code before (BEFORE_SRC), this code reading every step (READ_EVERY=1) and its default (8),
# interleaved ROUNDS times, one JSON line per run into OUT.
# usage: BEFORE_SRC=/path/to/old/vllm-proxima/src bash run.sh OUT.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?out.jsonl}; ROUNDS=${ROUNDS:-2}
HERE=docs/benchmarks/cpu-reading-2026-12-04
: > "$OUT"
M=models/tiny-llama
SW=${SW_MODEL:-/tmp/tiny-sw128}  # sliding window 128, layers sliding/full (see README)
POINTS=(
  "$M 120000 2000 uniform on adaptive"        # a burst, ~400 running
  "$M 120000 2000 uniform off conservative"
  "$M 120000 2000 uniform on adaptive 32 256 2"      # clients asking 2x what they use
  "$M 120000 2000 uniform on conservative 32 256 2"
  "$M 150000 600 uniform on adaptive 500 1500"  # long outputs past the horizon, ~170 running
  "$M 60000 1000 uniform on adaptive"         # ~210 running
  "$M 30000 600 sysprompt on adaptive"        # shared system prompts
  "$M 20000 300 chat on adaptive"             # multi-turn chats
  "$M 40000 64 uniform on adaptive 1000 2000" # long outputs: the horizon's case
  "$M 16000 400 uniform on adaptive"          # a tight pool
  "$SW 60000 1000 uniform on adaptive"        # sliding windows: read every step
)
run() {  # label src read_every point...
  local label=$1 src=$2 every=$3; shift 3
  PYTHONPATH=$src:proxima-bench/src .venv/bin/python $HERE/reading.py "$label" "$every" "$@" \
    2>/dev/null | grep '^{' >> "$OUT"
}
for i in $(seq "$ROUNDS"); do
  for p in "${POINTS[@]}"; do
    # shellcheck disable=SC2086
    run base "$BEFORE_SRC" - $p
    # shellcheck disable=SC2086
    run every-1 vllm-proxima/src 1 $p
    # shellcheck disable=SC2086
    run every-8 vllm-proxima/src - $p
  done
done
