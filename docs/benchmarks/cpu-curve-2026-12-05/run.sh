#!/usr/bin/env bash
# Admission CPU per step and the scheduling outcome in the scheduler simulator for three codes,
# interleaved ROUNDS times, one JSON line per run into OUT:
#   before   690d423 (sliding-window models read every step; every candidate a full placement)
#   windows  e7c40f0 (the sliding-window reading kept for several steps)
#   curve    the checkout (cf5d17d: placements through the residents' demand curve)
# usage: BEFORE_SRC=/path/690d423/vllm-proxima/src WINDOWS_SRC=/path/e7c40f0/vllm-proxima/src \
#        SW_MODEL=/tmp/sw/alt128 bash run.sh OUT.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?out.jsonl}; ROUNDS=${ROUNDS:-3}
R=docs/benchmarks/cpu-reading-2026-12-04/reading.py
: > "$OUT"
M=models/tiny-llama
SW=${SW_MODEL:?models/tiny-llama with sliding_window 128 and layer_types [sliding_attention, full_attention]}
POINTS=(
  "$SW 60000 1000 uniform on adaptive"   # sliding windows, ~140 running
  "$M 120000 2000 uniform on adaptive"   # a burst, ~400 running
  "$M 60000 1000 uniform on adaptive"    # ~210 running
)
for i in $(seq "$ROUNDS"); do
  for p in "${POINTS[@]}"; do
    for code in before windows curve; do
      case $code in before) src=$BEFORE_SRC ;; windows) src=$WINDOWS_SRC ;; curve) src=vllm-proxima/src ;; esac
      # shellcheck disable=SC2086
      PYTHONPATH=$src:proxima-bench/src .venv/bin/python $R "$code" - $p 2>/dev/null | grep '^{' >> "$OUT"
    done
  done
done
