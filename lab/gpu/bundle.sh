#!/usr/bin/env bash
# Builds the offline GPU bundle: proxima-vllm (patched vLLM 0.26.0 + vllm_proxima) for an air-gapped
# CUDA 13 host that already has Python 3.12, torch 2.11.0+cu130 and triton 3.6.0 but no package index
# (the H200 device machine). Two parts, each under 60 MiB, sent in back-to-back calls:
#   .gpu-kit/p1/c_stable.xz     vllm/_C_stable_libtorch.abi3.so (xz -9e)
#   .gpu-kit/p2/pysrc.tar.xz    vLLM's Python tree with the patch series applied, vllm_proxima, and a
#                               dist-info whose entry points register proxima's plugins
#   .gpu-kit/p2/fa3.xz          FlashAttention 3 extension (stock's default backend on Hopper)
#   .gpu-kit/p2/whl/*.whl       pure-Python and manylinux dependency wheels the host lacks
#                               (lab/gpu/wheels.txt), CPython 3.12
# Each part has a SHA256SUMS; lab/gpu/device.sh verifies and unpacks them on the host.
# Adapted from the stock recipe in ../shared/gpu-bundle/make_kit.sh.
#
# Usage: bash lab/gpu/bundle.sh [--force]      (needs the CUDA wheel: proxima_tools.upstream fetch --only cuda,
#        and the patched tree: proxima_tools.series import)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${DEST:-$ROOT/.gpu-kit}
WORK=${WORK:-$ROOT/build/gpu-bundle}
TREE=${TREE:-$ROOT/build/vllm-src}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1
log() { echo "[gpu bundle] $*"; }

WHEEL=${CUDA_WHEEL:-}
if [ -z "$WHEEL" ]; then
  WHEEL=$(PYTHONPATH="$ROOT/tools" python3 -m proxima_tools.upstream path cuda)
fi
[ -f "$WHEEL" ] || { echo "CUDA wheel not found: $WHEEL" >&2; exit 1; }
[ -d "$TREE/.git" ] || { echo "patched tree $TREE missing: run PYTHONPATH=tools python3 -m proxima_tools.series import" >&2; exit 1; }
git -C "$TREE" rev-parse -q --verify upstream-0.26.0 >/dev/null || { echo "$TREE has no tag upstream-0.26.0" >&2; exit 1; }

mkdir -p "$DEST/p1" "$DEST/p2/whl" "$WORK"
X="$WORK/x"
if [ ! -f "$X/.unpacked" ] || [ "$FORCE" = 1 ]; then
  log "unpacking $(basename "$WHEEL")"
  rm -rf "$X"; mkdir -p "$X"; (cd "$X" && unzip -q "$WHEEL"); touch "$X/.unpacked"
fi

if [ "$FORCE" = 1 ] || [ ! -s "$DEST/p1/c_stable.xz" ]; then
  log "p1: compressing _C_stable_libtorch (xz -9e, ~2 min)"
  xz -9e -T0 -c "$X/vllm/_C_stable_libtorch.abi3.so" > "$DEST/p1/c_stable.xz"
fi
if [ "$FORCE" = 1 ] || [ ! -s "$DEST/p2/fa3.xz" ]; then
  log "p2: compressing the FA3 extension"
  xz -9e -T0 -c "$X/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" > "$DEST/p2/fa3.xz"
fi

# Python tree: upstream's wheel files, the series' changed files from the patched tree (checked against
# the base so a wheel/sdist mismatch is caught), our package, and entry points for our plugins.
STAGE="$WORK/stage"; rm -rf "$STAGE"; mkdir -p "$STAGE"
(cd "$X" && tar --exclude='*.so' --exclude='vllm/vllm-rs' --exclude='__pycache__' \
    --exclude='vllm/third_party/deep_gemm' --exclude='vllm/third_party/fmha_sm100' \
    -cf - vllm vllm-0.26.0.dist-info) | tar -xf - -C "$STAGE"
cp "$X/vllm/cumem_allocator.abi3.so" "$STAGE/vllm/"
changed=$(git -C "$TREE" diff --name-only upstream-0.26.0 HEAD)
for f in $changed; do
  if [ -f "$X/$f" ] && ! git -C "$TREE" show "upstream-0.26.0:$f" | cmp -s - "$X/$f"; then
    echo "$f in the wheel differs from the patch base: refusing to overlay" >&2; exit 1
  fi
  if [ -f "$TREE/$f" ]; then mkdir -p "$STAGE/$(dirname "$f")"; cp "$TREE/$f" "$STAGE/$f"; else rm -f "$STAGE/$f"; fi
done
log "overlaid $(echo "$changed" | grep -c . || true) patched file(s)"
(cd "$ROOT/vllm-proxima/src" && tar --exclude='__pycache__' -cf - vllm_proxima) | tar -xf - -C "$STAGE"
# The dist-info's entry points: upstream's plus every group vllm-proxima/pyproject.toml declares
# (plugins, stat loggers and the engine-args hooks the patch series looks up), merged as the wheel
# builder merges them, so the bundle and the wheel register the same hooks.
PYTHONPATH="$ROOT/tools" python3 - "$STAGE/vllm-0.26.0.dist-info/entry_points.txt" \
    "$ROOT/vllm-proxima/pyproject.toml" <<'EOF'
import sys
from pathlib import Path

from proxima_tools.wheels import merge_entry_points, pyproject_entry_points

path, pyproject = Path(sys.argv[1]), Path(sys.argv[2])
extra = pyproject_entry_points(pyproject)
groups = {group for group, _, _ in extra}
missing = {"vllm.general_plugins", "vllm.stat_logger_plugins", "vllm.engine_args_hooks"} - groups
if missing:
    sys.exit(f"{pyproject} declares no {sorted(missing)} entry points")
path.write_bytes(merge_entry_points(path.read_text(), extra))
EOF
(cd "$STAGE" && tar --sort=name --mtime=@0 --owner=0 --group=0 -cf - vllm vllm_proxima vllm-0.26.0.dist-info \
   | xz -9 -T0 > "$DEST/p2/pysrc.tar.xz")

if [ "$FORCE" = 1 ] || [ -z "$(ls -A "$DEST/p2/whl")" ]; then
  log "p2: downloading dependency wheels for CPython 3.12"
  rm -f "$DEST/p2/whl"/*.whl
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    --platform any -d "$DEST/p2/whl" -r "$ROOT/lab/gpu/wheels.txt" 2>&1 | grep -v "is ignored: it is neither" || true
fi
for p in p1 p2; do (cd "$DEST/$p" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS); done
for p in p1 p2; do
  size=$(du -sb "$DEST/$p" | cut -f1)
  log "$p: $size bytes"
  [ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "$p is over 60 MiB" >&2; exit 1; }
done
