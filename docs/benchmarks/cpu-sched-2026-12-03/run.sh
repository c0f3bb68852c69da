#!/usr/bin/env bash
# Scheduler CPU time per step in the simulator: stock, proxima before (BEFORE_SRC) and after (this
# checkout), interleaved ROUNDS times per workload, one JSON line per run into OUT.
# usage: BEFORE_SRC=/path/to/old/vllm-proxima/src bash run.sh OUT.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?out.jsonl}; ROUNDS=${ROUNDS:-3}
: > "$OUT"
run() {  # label src args...
  local label=$1 src=$2; shift 2
  PYTHONPATH=$src .venv/bin/python -m vllm_proxima.bench.simulate --requests 1000 "$@" 2>/dev/null \
    | grep '^{' | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line); r['code'] = '$label'; r['args'] = '$*'; print(json.dumps(r))" >> "$OUT"
}
for wl in "--workload sysprompt --prefix-caching --kv-slots 16384" \
          "--workload chat --prefix-caching --kv-slots 65536" \
          "--workload uniform --kv-slots 16384"; do
  for i in $(seq "$ROUNDS"); do
    run stock vllm-proxima/src $wl --configs stock
    run before "$BEFORE_SRC" $wl --configs proxima-adaptive
    run after vllm-proxima/src $wl --configs proxima-adaptive
  done
done
