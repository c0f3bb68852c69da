#!/usr/bin/env bash
# Scheduler CPU at a burst in the simulator, stock vs proxima: ROUNDS (3) interleaved timing runs
# (times.jsonl), then one py-spy sampling run each (500 Hz, raw stacks: spy-*.txt, attributed in
# attribution.jsonl). usage: bash run.sh   (from anywhere; pip install py-spy first)
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd); cd "$D/../../.."
export PYTHONPATH=vllm-proxima/src:proxima-bench/src
PY=.venv/bin/python; POINT="models/tiny-llama 60000 1000"
: > "$D/times.jsonl"
for i in $(seq "${ROUNDS:-3}"); do
  for code in stock proxima; do
    # shellcheck disable=SC2086
    $PY "$D/burst.py" $code $POINT 2>/dev/null | grep '^{' >> "$D/times.jsonl"
  done
done
for code in stock proxima; do
  # shellcheck disable=SC2086
  .venv/bin/py-spy record -r 500 -f raw -o "/tmp/spy-$code.txt" -- $PY "$D/burst.py" $code $POINT > /dev/null 2>&1
done
$PY "$D/attribute.py" /tmp/spy-stock.txt /tmp/spy-proxima.txt > "$D/attribution.jsonl"
