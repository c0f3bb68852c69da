#!/usr/bin/env bash
# The dashboard over a real run, on the CPU: proxima's OpenAI server on the tiny model (a 4 MiB KV
# cache, so requests queue), Debian's Prometheus scraping it every second, a bounded load in
# phases (observability/load.py), then every panel's query sent to Prometheus and drawn
# (observability/render.py) into docs/observability/dashboard.png, with the answers as JSON beside
# it. Needs `apt-get install prometheus` and `bash scripts/setup.sh` first. About 5 minutes. The
# server runs the installed package; PYTHONPATH=vllm-proxima/src runs the source tree instead.
#   bash observability/demo.sh                 # the default (paged layout)
#   bash observability/demo.sh --proxima-kv-layout token
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PORT=${PORT:-8011}
PROM_PORT=${PROM_PORT:-9091}
PHASES=${PHASES:-8:40,32:50,96:60,0:40}
OUT=${OUT:-docs/observability/dashboard.png}
WORK=$(mktemp -d)
command -v prometheus >/dev/null || { echo "[demo] needs prometheus (apt-get install prometheus)"; exit 1; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 TORCH_COMPILE_DISABLE=1
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

echo "[demo] server on 127.0.0.1:$PORT (log $WORK/server.log), args: $*"
setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model models/tiny-llama \
  --served-model-name tiny --host 127.0.0.1 --port "$PORT" --enforce-eager --dtype float32 \
  --max-model-len 1024 --kv-cache-memory-bytes $((4 << 20)) --disable-uvicorn-access-log "$@" \
  > "$WORK/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 240); do curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 1; done
curl -fs "http://127.0.0.1:$PORT/health" >/dev/null || { tail -40 "$WORK/server.log"; exit 1; }

cat > "$WORK/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 5s}
scrape_configs:
  - job_name: vllm
    static_configs: [{targets: ['127.0.0.1:$PORT']}]
EOF
setsid prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$WORK/prometheus.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do curl -fs "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null 2>&1 && break; sleep 1; done
sleep 5
start=$(date +%s)
"$VENV/bin/python" observability/load.py --url "http://127.0.0.1:$PORT" --model tiny --phases "$PHASES"
sleep 3
end=$(date +%s)
"$VENV/bin/python" observability/render.py --prometheus "http://127.0.0.1:$PROM_PORT" --model-name tiny \
  --start "$start" --end "$end" --out "$OUT" \
  --title "proxima-vllm on the CPU, tiny model, 4 MiB KV, load phases $PHASES (drawn from Prometheus by render.py; args: ${*:-defaults})"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^(proxima:|vllm:(kv_cache_usage_perc|num_requests|prefix_cache|num_preemptions))' \
  > "${OUT%.png}-idle-metrics.txt"
echo "[demo] idle /metrics at the end: ${OUT%.png}-idle-metrics.txt"
