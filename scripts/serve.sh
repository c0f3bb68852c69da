#!/usr/bin/env bash
# The main job on a fresh machine: set everything up (scripts/setup.sh), start proxima-vllm's OpenAI server
# on the embedded tiny model (127.0.0.1:${PORT:-8000}), show one completion, and keep serving until stopped.
# Extra arguments go to the server, e.g. `bash scripts/serve.sh --proxima off`.
#
# Stopping: Ctrl-C (SIGINT) or SIGTERM stops the server and everything it started (its process group:
# API server, engine core), waits up to 30 s for a clean shutdown, then kills what is left. In the
# background (`bash scripts/serve.sh &`) use `kill %1` or `kill "$(cat .cache/serve.pid)"`: a job
# started in the background by a non-interactive shell ignores SIGINT, and bash cannot trap a signal
# that was ignored when it started.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PORT=${PORT:-8000}
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 TORCH_COMPILE_DISABLE=1
LOG=${LOG:-.cache/serve.log}
PIDFILE=.cache/serve.pid
PID=

stop() {  # stop the server's whole process group: SIGTERM (vLLM shuts down cleanly), then SIGKILL
  trap - EXIT INT TERM
  if [ -n "$PID" ] && kill -0 -- "-$PID" 2>/dev/null; then
    echo "[serve] stopping the server (process group $PID)"
    kill -TERM -- "-$PID" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 -- "-$PID" 2>/dev/null || break; sleep 1; done
    if kill -0 -- "-$PID" 2>/dev/null; then
      echo "[serve] still running after 30 s: killing it"
      kill -KILL -- "-$PID" 2>/dev/null || true
    fi
    echo "[serve] stopped"
  fi
  rm -f "$PIDFILE"
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT
echo $$ > "$PIDFILE"

echo "[serve] starting the server on http://127.0.0.1:$PORT (log: $LOG)"
set -m  # job control for this one job: the server gets a process group of its own (PGID = its PID)
"$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model models/tiny-llama --served-model-name tiny \
  --host 127.0.0.1 --port "$PORT" --enforce-eager --dtype float32 --max-model-len 1024 \
  --kv-cache-memory-bytes $((64 << 20)) "$@" > "$LOG" 2>&1 < /dev/null &
PID=$!
set +m
for _ in $(seq 1 240); do
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
echo "[serve] serving on http://127.0.0.1:$PORT (Ctrl-C or kill $$ to stop); metrics: /metrics"
wait $PID
