#!/usr/bin/env bash
# The main job on a fresh machine: set everything up (scripts/setup.sh), start proxima-vllm's OpenAI server
# on the embedded tiny model (127.0.0.1:${PORT:-8000}), show one completion, and keep serving until Ctrl-C.
# Extra arguments go to the server, e.g. `bash scripts/serve.sh --proxima off`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PORT=${PORT:-8000}
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 TORCH_COMPILE_DISABLE=1
LOG=${LOG:-.cache/serve.log}
echo "[serve] starting the server on http://127.0.0.1:$PORT (log: $LOG)"
"$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model models/tiny-llama --served-model-name tiny \
  --host 127.0.0.1 --port "$PORT" --enforce-eager --dtype float32 --max-model-len 1024 \
  --kv-cache-memory-bytes $((64 << 20)) "$@" > "$LOG" 2>&1 &
PID=$!
trap 'kill -INT $PID 2>/dev/null; wait $PID 2>/dev/null' EXIT INT TERM
for i in $(seq 1 240); do
  if curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 $PID 2>/dev/null; then echo "[serve] the server exited; last lines of $LOG:"; tail -40 "$LOG"; exit 1; fi
  sleep 1
done
curl -fs "http://127.0.0.1:$PORT/health" >/dev/null || { echo "[serve] not healthy after 240 s"; tail -40 "$LOG"; exit 1; }
grep -m1 "proxima-vllm" "$LOG" | sed 's/^.*\] /[server] /' || true
echo "[serve] POST /v1/completions:"
curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}'
echo
echo "[serve] serving on http://127.0.0.1:$PORT (Ctrl-C to stop); metrics: /metrics"
wait $PID
