#!/usr/bin/env bash
# Scheduler CPU time per step in the simulator at batch 32 (prefix caching on, a 75,000-token pool
# of 16-token pages, the brief's workload): stock, proxima's hooks with upstream's admission
# (proxima-stock) and the default (proxima-adaptive), before (BEFORE_SRC) and after (this checkout)
# the cached-page recount throttle, interleaved ROUNDS times, one JSON line per run into OUT.
# usage: BEFORE_SRC=/path/to/old/vllm-proxima/src bash run.sh OUT.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?out.jsonl}; ROUNDS=${ROUNDS:-3}
: > "$OUT"
run() {  # label src
  local label=$1 src=$2
  PYTHONPATH=$src .venv/bin/python -m proxima_bench.sim.simulate --requests 1000 --kv-slots 75000 \
    --max-num-seqs 32 --prefix-caching --configs stock,proxima-stock,proxima-adaptive 2>/dev/null \
    | grep '^{' | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line); r['code'] = '$label'; print(json.dumps(r))" >> "$OUT"
}
for i in $(seq "$ROUNDS"); do
  run before "$BEFORE_SRC"
  run after vllm-proxima/src
done
