#!/usr/bin/env bash
# The GPU proof plans, run on the device machine after lab/gpu/device.sh setup.
#   bash lab/gpu/proof.sh PLAN
# PLAN, named for what it measures (engine_ab: proxima and stock engines, one process each; serve_ab and
# matrix: through the OpenAI server):
#   smoke             one proxima engine, 200 requests: the bundle works
#   policies-ab       proxima's three admission policies on base, mt4 and overload vs stock (FA3)
#   backends-ab       the attention kernels, then proxima vs stock with FA3 and with Triton, greedy parity
#   prefix-sysprompt  shared system prompts, prefix caching on on both sides
#   prefix-chat       multi-turn chats (200 x 5 turns), prefix caching on, 64 GiB KV
#   evict-sysprompt   shared system prompts at 2 GiB KV (the cache must evict), per eviction policy
#   evict-chat        chats at 32 GiB KV (evicting, hits left), per eviction policy
#   fa3-token-pages   FlashAttention over 1-token pages (PROXIMA_ATTENTION=flash_attn) vs Triton vs stock
#   serve | serve-sharegpt               the serving A/B, 7B shape: the brief's workload / ShareGPT lengths
#   kernels                              attention kernels over 1- and 16-token pages, MHA/GQA, hd 64/128
#   matrix-8b | matrix-7b | matrix-qwen  the workload matrix, stock and proxima servers up at once
#   attrib-8b         attribution: stock, proxima, proxima with stock admission, whole-future projection
#   soak-8b           the overload soak, stock and proxima side by side, RATE req/s each for SOAK_S s (issue 15)
#   aa-qwen           issue 13: an A/A control on the Qwen2.5-7B shape (two stock and two proxima servers)
#   dropin-8b         issue 16 on the GPU: n-gram speculative decoding on both sides, and a sliding-window
#                     variant of the shape (alternating sliding/full, window 128) as a --pair; four servers
#   dropin-on-8b      dropin-8b with the proxima servers forced on (--proxima-on); on a GPU under 120 GB
#                     the n-gram pair alone (DROPIN_SMALL=sw: the sliding-window pair)
#   step-profile      a decode step's parts (scheduler, KV manager, input preparation, GPU busy and idle),
#                     stock and proxima, batch 1/32/128/512, prefix caching on and off
#   bursts-gqa        bursts and c32 on the Qwen2.5-7B shape (GQA-4) with the Llama-3-8B shape (GQA-8) as a pair
#   tp2 | ray         tensor parallelism over 2 GPUs; vLLM's Ray executor
# Old plan names, cited by docs/benchmarks/*/README.md and older results (tags, file names), still work:
#   a -> policies-ab   b -> backends-ab   d -> prefix-sysprompt   e -> prefix-chat
#   f -> evict-sysprompt   f2 -> evict-chat   g -> fa3-token-pages
# (Before the move to lab/gpu/ this was scripts/gpu_proof.sh.)
# serve* and matrix-* need the tiny model's tokenizer: carry models/tiny-llama (proxima_tools.tiny_model makes it).
# tp2 needs 2 GPUs (the nvidia-h200-x2 kind); ray needs Ray in the bundle (pip install ray).
# Each engine runs in its own process under a time cap; everything lands in /tmp/proof-PLAN and is
# packed into $OUT/proof-PLAN.tgz (plus results.jsonl and the log uncompressed) because only a few
# files come back from a device call. BUDGET_S bounds the whole plan (default 560 s).
set -uo pipefail
PLAN=${1:?plan}
case $PLAN in  # the old names (see above)
  a) PLAN=policies-ab ;; b) PLAN=backends-ab ;; d) PLAN=prefix-sysprompt ;; e) PLAN=prefix-chat ;;
  f) PLAN=evict-sysprompt ;; f2) PLAN=evict-chat ;; g) PLAN=fa3-token-pages ;;
esac
[ "$PLAN" = "$1" ] || echo "plan $1 is now called $PLAN"
OUTD=${OUT:-/tmp/out}
W=/tmp/proof-$PLAN
mkdir -p "$W" "$OUTD"
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-560}
eval "$(bash lab/gpu/device.sh env)"
export PYTHONPATH=$PWD/vllm-proxima/src:$PWD/proxima-bench/src:$PYTHONPATH   # this checkout's vllm_proxima and proxima_bench win over the bundle's
LOG=$W/log.txt

left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
gpu_mib() { nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -dc 0-9; }

engine() {  # engine NAME CAP ARGS...
  local name=$1 cap=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 60 ]; then echo "SKIPPED $name: ${l}s left" | tee -a "$LOG"; return; fi
  [ "$cap" -gt "$l" ] && cap=$l
  echo "=== $name (cap ${cap}s): $*" | tee -a "$LOG"
  local ts; ts=$(date +%s)
  # --budget-s: no new run starts once this much of the cap has passed (a run takes ~25 s).
  timeout -k 5 "$cap" python3 -m proxima_bench.engine.ab --out-dir "$W" --budget-s $((cap - 30)) "$@" \
    > "$W/$name.log" 2>&1
  local rc=$?
  echo "=== $name rc=$rc took $(( $(date +%s) - ts ))s" | tee -a "$LOG"
  grep -E "^(ENGINE|RESULT|SKIPPED)" "$W/$name.log" | cut -c1-900
  grep -E "Using .* backend|GPU KV cache size|Graph capturing finished|init engine|torch.compile t" "$W/$name.log" | cut -c1-200 | head -6
  if [ $rc -ne 0 ]; then echo "--- tail of $name.log"; tail -30 "$W/$name.log" | cut -c1-400; fi
}

shape_model() {  # shape_model SHAPE [ARGS...]: /tmp/SHAPE (or the --out in ARGS) made once
  local shape=$1 out="" a prev=""; shift
  for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
  [ -n "$out" ] || set -- "$@" --out "/tmp/$shape"
  [ -d "${out:-/tmp/$shape}" ] && return 0
  python3 -m proxima_bench.planner.shape_model --shape "$shape" --tokenizer models/tiny-llama \
    "$@" >> "$W/shape.log" 2>&1 || { tail "$W/shape.log"; exit 1; }
}

matrix() {  # matrix TITLE SHAPE GPU_UTIL KV_BYTES ARGS...: the serving matrix on /tmp/SHAPE, all
  # servers up at once (GPU_UTIL of the GPU each), every point interleaved; --budget-s is what the
  # plan has left less 30 s to stop the servers, the timeout the hard cap; raw.json and report.md
  # come back as $PLAN-raw.json and $PLAN-report.md. ARGS: the plan's own matrix arguments.
  local title=$1 shape=$2 util=$3 kvb=$4; shift 4
  local l; l=$(left)
  echo "=== $title $shape (budget $((l - 30))s, cap $((l - 5))s)" | tee -a "$LOG"
  timeout -k 10 $((l - 5)) python3 -m proxima_bench.serving.matrix --model /tmp/$shape \
    --server-args "--served-model-name m --load-format dummy --dtype bfloat16 --max-model-len 4096 \
                   --gpu-memory-utilization $util --kv-cache-memory-bytes $kvb" \
    "$@" --budget-s $((l - 30)) --server-timeout 300 --stop-timeout 15 \
    --out "$W/matrix" > "$W/matrix.log" 2>&1
  echo "=== matrix rc=$?" | tee -a "$LOG"
  grep -E "ratio|ready in|skip|FAILED" "$W/matrix.log" | cut -c1-300 | tail -40
  cp "$W/matrix/raw.json" "$OUTD/$PLAN-raw.json" 2>/dev/null
  cp "$W/matrix/report.md" "$OUTD/$PLAN-report.md" 2>/dev/null
}

python3 -c "import vllm, vllm_proxima, torch; print('vllm', vllm.__version__, vllm.__file__, 'proxima', vllm_proxima.__version__, 'torch', torch.__version__)" 2>&1 | tail -1
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
# Clocks, temperature and power every second, to tell machine drift from real differences.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv -l 1 > "$W/gpu-monitor.csv" 2>/dev/null &
MON=$!
trap 'kill $MON 2>/dev/null' EXIT

case $PLAN in
  smoke)
    engine proxima-smoke 200 --engine proxima --runs base --policies adaptive --num-requests 200 --tag smoke
    ;;
  policies-ab)
    engine proxima 330 --engine proxima --runs base:adaptive+conservative+stock,mt4:adaptive,overload:adaptive --tag policies-ab
    engine stock-fa3 230 --engine stock-fa3 --runs base,mt4,overload --tag policies-ab
    ;;
  backends-ab)
    echo "=== kernels" | tee -a "$LOG"
    timeout -k 5 90 python3 -m proxima_bench.kernels.bench --out "$W/kernels.jsonl" > "$W/kernels.log" 2>&1
    echo "kernels rc=$?"; grep KERNEL "$W/kernels.log" | cut -c1-300; tail -3 "$W/kernels.log" | cut -c1-300
    engine proxima 190 --engine proxima --runs base:adaptive,mt4:adaptive,mt1.5:adaptive,parity:stock --tag backends-ab
    engine stock-fa3 75 --engine stock-fa3 --runs base --tag backends-ab
    engine stock-triton 90 --engine stock-triton --runs base,parity --tag backends-ab
    ;;
  prefix-sysprompt)  # issue 8 (a): shared system prompts, prefix caching on on both sides
    # Caps allow a cold machine's engine start (proxima ~95 s, stock ~60 s; plan d, now prefix-sysprompt, of 2026-12-03).
    engine proxima 200 --engine proxima --prefix-caching --runs sysprompt:adaptive --tag prefix-sysprompt
    engine stock-fa3 170 --engine stock-fa3 --prefix-caching --runs sysprompt --tag prefix-sysprompt
    ;;
  prefix-chat)  # issue 8 (b): multi-turn chats (200 x 5 turns), prefix caching on on both sides.
    # 64 GiB KV (131,072 slots on the 7B shape): at 8 GiB the 200 histories cannot stay cached while
    # the next turns queue (the CPU simulation: 0 % hits on both sides at 16,384 slots, 56-58 % at
    # 131,072; docs/benchmarks/cpu-sim-2026-12-03).
    engine proxima 220 --engine proxima --prefix-caching --kv-bytes $((64 * 1024**3)) \
      --runs chat:adaptive --tag prefix-chat
    engine stock-fa3 170 --engine stock-fa3 --prefix-caching --kv-bytes $((64 * 1024**3)) \
      --runs chat --tag prefix-chat
    ;;
  evict-sysprompt)  # issue 8 (c): shared system prompts at 2 GiB KV, where the cache must evict; per policy
    engine proxima 340 --engine proxima --prefix-caching --kv-bytes $((2 * 1024**3)) \
      --runs sysprompt:adaptive --evict lru,lfu,arc --num-requests 300 --tag evict-sysprompt
    engine stock-fa3 200 --engine stock-fa3 --prefix-caching --kv-bytes $((2 * 1024**3)) \
      --runs sysprompt --num-requests 300 --tag evict-sysprompt
    ;;
  evict-chat)  # issue 8 (c): chats at 32 GiB KV (65,536 slots on the 7B shape), evicting but with hits left:
    # at 2 GiB no history survives on either side (CPU simulation, docs/benchmarks/cpu-sim-2026-12-03)
    engine proxima 340 --engine proxima --prefix-caching --kv-bytes $((32 * 1024**3)) \
      --runs chat:adaptive --evict lru,lfu,arc --tag evict-chat
    engine stock-fa3 200 --engine stock-fa3 --prefix-caching --kv-bytes $((32 * 1024**3)) \
      --runs chat --tag evict-chat
    ;;
  fa3-token-pages)  # FlashAttention over 1-token pages (PROXIMA_ATTENTION=flash_attn, experimental) vs Triton vs stock
    export PROXIMA_ATTENTION=flash_attn
    engine proxima-fa3 200 --engine proxima --runs base:adaptive,parity:stock --tag fa3-token-pages-fa3
    unset PROXIMA_ATTENTION
    engine stock-fa3 130 --engine stock-fa3 --runs base,parity --tag fa3-token-pages
    engine proxima-triton 170 --engine proxima --runs base:adaptive --tag fa3-token-pages-triton
    ;;
  serve|serve-sharegpt)  # issue 6: the serving A/B through the OpenAI server, 7B shape, 8 GiB KV, stock then
    # proxima; serve = the brief's workload (1,000 prompts would take ~2x the time: 400 per point),
    # serve-sharegpt = ShareGPT-like log-normal lengths (mean output 338 tokens, so from 32 up)
    if [ "$PLAN" = serve ]; then wl=baseline; conc=16,32,64,128,256; else wl=sharegpt; conc=32,64,128,256; fi
    shape_model llama-2-7b --out /tmp/llama-2-7b-shape
    l=$(left)
    echo "=== serve_ab $wl (cap $((l - 20))s)" | tee -a "$LOG"
    timeout -k 10 $((l - 20)) python3 -m proxima_bench.serving.ab --model /tmp/llama-2-7b-shape \
      --server-args "--load-format dummy --dtype bfloat16 --max-model-len 4096 \
                     --kv-cache-memory-bytes 8589934592 --no-enable-prefix-caching" \
      --workload $wl --num-prompts 400 --concurrency $conc --server-timeout 240 \
      --no-report --out "$W/serve" > "$W/serve_ab.log" 2>&1
    echo "=== serve_ab rc=$?" | tee -a "$LOG"; tail -25 "$W/serve_ab.log" | cut -c1-300
    cp "$W/serve/raw.json" "$OUTD/$PLAN-raw.json" 2>/dev/null
    ;;
  kernels)  # issue 13: attention kernels over 1- and 16-token pages, MHA/GQA-8/GQA-4, hd 64/128
    l=$(left)
    echo "=== kernels (cap $((l - 10))s)" | tee -a "$LOG"
    timeout -k 5 $((l - 10)) python3 -m proxima_bench.kernels.bench --out "$W/kernels.jsonl" \
      --max-seconds $((l - 30)) > "$W/kernels.log" 2>&1
    echo "=== kernels rc=$?" | tee -a "$LOG"; grep SUMMARY "$W/kernels.log" | cut -c1-300
    tail -5 "$W/kernels.log" | cut -c1-300
    python3 -m proxima_bench.kernels.report "$W/kernels.jsonl" --out "$W/kernels.md" > /dev/null 2>&1
    cp "$W/kernels.jsonl" "$W/kernels.md" "$OUTD/" 2>/dev/null
    ;;
  matrix-8b|matrix-7b|matrix-qwen)  # the workload matrix (bench.matrix): stock and proxima servers up at
    # once on the one GPU (0.42 of its memory each), points interleaved, in priority order; a model shape
    # with dummy weights and the tiny tokenizer; prefix caching at vLLM's default (on).
    # MATRIX_POINTS overrides the point list, REPEATS the repeats (1). MATRIX_CONTROL=1 adds the A/A
    # control (--control: a second stock server, stock-b, compared with stock), three servers at 0.30.
    # MATRIX_KV_BYTES overrides the KV bytes per server.
    case $PLAN in
      matrix-8b) shape=llama-3-8b; kvb=$((4 * 1024**3)) ;;
      matrix-7b) shape=llama-2-7b; kvb=$((8 * 1024**3)) ;;
      matrix-qwen) shape=qwen2.5-7b; kvb=$((4 * 1024**3)) ;;
    esac
    shape_model $shape
    kvb=${MATRIX_KV_BYTES:-$kvb}   # e.g. 2 GiB for a pool tight enough that admission defers
    util=0.42; control=()
    [ "${MATRIX_CONTROL:-0}" = 1 ] && { util=0.30; control=(--control); }
    matrix matrix $shape $util $kvb "${control[@]}" \
      --points ${MATRIX_POINTS:-parity,mix-burst,mix-c32,longprompt-c32,mix-c64,sysprompt-c64,mix-c128,poisson,mixed-c64,longout-c64,chat-c64,mix-c1,mix-c8,mix-c256} \
      --repeats ${REPEATS:-1}
    ;;
  soak-8b)  # issue 15: overload soak, Llama-3-8B shape, 4 GiB KV each, stock and proxima side by side
    # (--concurrent: both servers on the GPU at once, the same seeded stream to each; one soak's time).
    # RATE default 62 req/s per server, 124 in all = 4x the knee of the whole GPU (c=32 on the mix:
    # ~4,456 tok/s / ~144 output tokens a request ~ 31 req/s; matrix run 1) and ~1.8x its burst
    # throughput: the queues grow for the whole soak, so the client timeout covers the drain.
    shape=llama-3-8b
    shape_model $shape
    # every request in flight holds a socket on both ends: raise the open-file limit; where the
    # hard limit is low, cap connections per server (the rest wait in the client, still timed).
    # --max-wall: what the plan's budget leaves after start-up (~110 s) and the stop, so the
    # results are written even if the drain runs long (requests still open then count as cut).
    ulimit -n "$(ulimit -Hn)" 2>/dev/null
    nofile=$(ulimit -n); conns=0
    [ "$nofile" != unlimited ] && [ "$nofile" -lt 200000 ] && conns=$(( (nofile - 2000) / 4 ))
    l=$(left)
    echo "=== soak $shape at ${RATE:-62} req/s a server, ${SOAK_S:-300} s, side by side (nofile $nofile, max connections $conns; cap $((l - 5))s)" | tee -a "$LOG"
    timeout -k 10 $((l - 5)) python3 -m proxima_bench.serving.soak --model /tmp/$shape --concurrent \
      --rate "${RATE:-62}" --seconds "${SOAK_S:-300}" --timeout 900 --max-connections $conns \
      --max-wall $((l - 200)) \
      --out "$W/soak" -- \
      --load-format dummy --dtype bfloat16 --max-model-len 4096 --gpu-memory-utilization 0.42 \
      --kv-cache-memory-bytes $((4 * 1024**3)) > "$W/soak.log" 2>&1
    echo "=== soak rc=$?" | tee -a "$LOG"; tail -20 "$W/soak.log" | cut -c1-400
    gzip -kf "$W/soak/soak.json" 2>/dev/null
    cp "$W/soak/soak.json.gz" "$W/soak/soak.png" "$OUTD/" 2>/dev/null
    ;;
  dropin-8b)  # issue 16: the Llama-3-8B shape with n-gram speculative decoding on stock and proxima,
    # and beside it (--pair sw) a sliding-window variant, alternating sliding/full layers with a
    # 128-token window (gpt-oss's layout), its own stock and proxima servers; four servers at once
    shape=llama-3-8b
    shape_model $shape
    shape_model $shape --sliding-window 128 --layers alternating --out /tmp/$shape-sw128
    NGRAM='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
    matrix "dropin matrix (+ $shape-sw128)" $shape 0.22 $((4 * 1024**3)) \
      --mode-args "stock=--speculative-config '$NGRAM'" --mode-args "proxima=--speculative-config '$NGRAM'" \
      --pair sw=/tmp/$shape-sw128 --points ${DROPIN_POINTS:-mix-c32,mix-burst} --repeats ${DROPIN_REPEATS:-3}
    ;;
  dropin-on-8b)  # issue 16 again, with proxima forced on (--proxima-on: auto leaves sliding-window
    # models to stock) and the sliding-window reading kept across steps: as dropin-8b (n-gram
    # spec on stock and proxima, the sliding-window pair beside them, four servers) on a GPU of
    # >= 120 GB; on a smaller one the sliding-window pair alone (two servers)
    shape=llama-3-8b
    shape_model $shape --out /tmp/$shape
    shape_model $shape --sliding-window 128 --layers alternating --out /tmp/$shape-sw128
    NGRAM='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
    if [ "$(gpu_mib)" -ge 120000 ]; then
      matrix "dropin matrix, proxima on (+ $shape-sw128)" $shape 0.22 $((4 * 1024**3)) --proxima-on \
        --mode-args "stock=--speculative-config '$NGRAM'" --mode-args "proxima=--speculative-config '$NGRAM'" \
        --pair sw=/tmp/$shape-sw128 --points ${DROPIN_POINTS:-mix-burst,mix-c32} --repeats ${DROPIN_REPEATS:-3}
    elif [ "${DROPIN_SMALL:-ngram}" = sw ]; then
      matrix "sliding-window matrix, proxima on" $shape-sw128 0.45 $((4 * 1024**3)) --proxima-on \
        --points ${DROPIN_POINTS:-mix-burst,mix-c32} --repeats ${DROPIN_REPEATS:-3}
    else  # the n-gram pair alone (the sliding-window pair ran on an H100: h100-bursts-2026-12-05)
      matrix "n-gram matrix, proxima on" $shape 0.45 $((4 * 1024**3)) --proxima-on \
        --mode-args "stock=--speculative-config '$NGRAM'" --mode-args "proxima=--speculative-config '$NGRAM'" \
        --points ${DROPIN_POINTS:-mix-burst,mix-c32} --repeats ${DROPIN_REPEATS:-3}
    fi
    ;;
  bursts-gqa)  # issue 13: bursts and c32 on GQA-4 (Qwen2.5-7B shape) and, as a pair, GQA-8 (Llama-3-8B
    # shape), 4 GiB KV each, stock beside each; a GPU under 120 GB runs the Qwen shape alone
    shape_model qwen2.5-7b
    shape_model llama-3-8b
    if [ "$(gpu_mib)" -ge 120000 ]; then
      matrix "bursts, GQA-4 (+ GQA-8 pair)" qwen2.5-7b 0.22 $((4 * 1024**3)) --pair gqa8=/tmp/llama-3-8b \
        --points ${BURST_POINTS:-mix-burst,mix-c32} --repeats ${BURST_REPEATS:-3}
    else
      matrix "bursts, GQA-4" qwen2.5-7b 0.45 $((4 * 1024**3)) \
        --points ${BURST_POINTS:-mix-burst,mix-c32} --repeats ${BURST_REPEATS:-3}
    fi
    ;;
  step-profile)  # issue 13, item 2: a decode step's parts, stock and proxima engines one after the other
    # (one process each, the engine core in-process), batch 1/32/128/512 at max_num_seqs 512, prefix
    # caching on (vLLM's default) and off; the Llama-3-8B shape (GQA-8), 20 GiB of KV
    shape=${PROFILE_SHAPE:-llama-3-8b}
    shape_model $shape
    # PROFILE_REPEATS (1) rounds; the order turns round each round (stock proxima, proxima stock):
    # at batch 512 the host-bound step varied more between processes than between the modes
    for r in $(seq "${PROFILE_REPEATS:-1}"); do
      order="stock proxima"; [ $((r % 2)) = 0 ] && order="proxima stock"
      for pc in ${PROFILE_CACHING:-on off}; do
        for m in $order; do
          l=$(left)
          if [ "$l" -lt 100 ]; then echo "SKIPPED $m caching $pc: ${l}s left" | tee -a "$LOG"; continue; fi
          echo "=== step profile $m, prefix caching $pc (cap $((l - 10))s)" | tee -a "$LOG"
          timeout -k 5 $((l - 10)) python3 -m proxima_bench.engine.step_profile --mode $m --model /tmp/$shape \
            --prefix-caching $pc --kv-bytes $((20 * 1024**3)) --batches ${PROFILE_BATCHES:-1,32,128,512} \
            --tag "$shape-r$r" --out "$W/step-profile.jsonl" > "$W/profile-$m-$pc.log" 2>&1
          echo "=== rc=$?" | tee -a "$LOG"
          grep -E "^(ENGINE|RESULT|SKIPPED)" "$W/profile-$m-$pc.log" | cut -c1-700
          grep -q "^RESULT" "$W/profile-$m-$pc.log" || tail -20 "$W/profile-$m-$pc.log" | cut -c1-300
          mv "$W/profile-$m-$pc.log" "$W/profile-$m-$pc-r$r.log"
        done
      done
    done
    cp "$W/step-profile.jsonl" "$OUTD/step-profile.jsonl" 2>/dev/null
    python3 -m proxima_bench.engine.step_profile report "$W/step-profile.jsonl" > "$OUTD/step-profile.md" 2>&1
    cat "$OUTD/step-profile.md"
    ;;
  aa-qwen)  # issue 13: is a gap below 1.0x within the machine's spread? The Qwen2.5-7B shape (GQA-4),
    # where mix-c32 ran 0.913 and 0.944: stock and proxima, and a second pair of both on the same model
    # (--pair aa=MODEL, an A/A control: aa-stock / stock is two stock servers' spread). Four servers at
    # 0.22 of the GPU each; points AA_POINTS (mix-c32,mix-c64), AA_REQUESTS_SCALE (4: 512 and 1,024
    # requests, ~15 s a run) times the requests, AA_REPEATS (2).
    shape=qwen2.5-7b
    shape_model $shape
    matrix "A/A matrix" $shape 0.22 $((4 * 1024**3)) --pair aa=/tmp/$shape \
      --requests-scale ${AA_REQUESTS_SCALE:-4} --points ${AA_POINTS:-mix-c32,mix-c64} --repeats ${AA_REPEATS:-2}
    ;;
  attrib-8b)  # issue 13 attribution: four servers on the Llama-3-8B shape, points repeated twice:
    # stock; proxima (defaults); admit-stock (proxima's hooks, upstream's admission: the hooks' cost);
    # peak (projection over the whole future, --proxima-horizon 0: the horizon's effect)
    shape=llama-3-8b
    shape_model $shape
    matrix "attribution matrix" $shape 0.22 $((4 * 1024**3)) \
      --mode admit-stock='--proxima-admission stock' --mode peak='--proxima-horizon 0' \
      --points mix-burst,longout-c64,mix-c128,mix-c64 --repeats 2
    ;;
  tp2)  # issue 9: Llama-2-13B shape over 2 GPUs, stock vs proxima, same run; 16 GiB KV per rank
    engine proxima-tp2 280 --engine proxima --model proxima-bench/src/proxima_bench/models/llama-2-13b \
      --tensor-parallel-size 2 --kv-bytes $((16 * 1024**3)) --runs base:adaptive --tag tp2
    engine stock-fa3-tp2 240 --engine stock-fa3 --model proxima-bench/src/proxima_bench/models/llama-2-13b \
      --tensor-parallel-size 2 --kv-bytes $((16 * 1024**3)) --runs base --tag tp2
    ;;
  ray)  # issue 9: vLLM's Ray executor with proxima on (one GPU is enough), then stock
    engine proxima-ray 200 --engine proxima --distributed-executor-backend ray --runs base:adaptive \
      --num-requests 200 --tag ray
    engine stock-fa3-ray 150 --engine stock-fa3 --distributed-executor-backend ray --runs base \
      --num-requests 200 --tag ray
    ;;
  *) echo "unknown plan $PLAN"; exit 1 ;;
esac
cp "$W/results.jsonl" "$OUTD/results-$PLAN.jsonl" 2>/dev/null
cp "$LOG" "$OUTD/log-$PLAN.txt" 2>/dev/null
tar czf "$OUTD/proof-$PLAN.tgz" -C "$W" . 2>/dev/null
echo "plan $PLAN took $(( $(date +%s) - T0 ))s"
