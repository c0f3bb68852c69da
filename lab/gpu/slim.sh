#!/usr/bin/env bash
# Keeps a device call under its 64 MiB carry limit. A call copies every tracked file beside the
# carried parts; part1 of the kit alone is ~56 MB, and docs/ (benchmark records, images) grows by
# each lease's raw JSON. The device never reads docs/, so move it out of the tree for the calls and
# put it back after them:
#   bash lab/gpu/slim.sh aside      # before the device calls: docs/ -> $SLIM_DIR (prints the size left)
#   bash lab/gpu/slim.sh back       # after them (also run it if a call failed; safe to repeat)
#   bash lab/gpu/slim.sh size       # tracked bytes that travel now, and the largest part's margin
set -euo pipefail
cd "$(dirname "$0")/../.."
SLIM_DIR=${SLIM_DIR:-/tmp/proxima-slim-docs}
LIMIT=$((64 * 1024 * 1024))

tracked() { { git ls-files -z | xargs -0 du -cb 2>/dev/null || true; } | tail -1 | cut -f1; }
largest() { du -sb .gpu-kit/p1 2>/dev/null | cut -f1 || echo 0; }

case ${1:-} in
  aside)
    if [ -e "$SLIM_DIR/docs" ]; then
      echo "$SLIM_DIR/docs already holds an earlier copy: run 'slim.sh back' first" >&2
      exit 2
    fi
    mkdir -p "$SLIM_DIR"
    mv docs "$SLIM_DIR/docs"
    echo "docs/ moved to $SLIM_DIR/docs; tracked bytes left: $(tracked)"
    ;;
  back)
    if [ ! -e "$SLIM_DIR/docs" ]; then echo "nothing aside"; exit 0; fi
    if [ -e docs ]; then echo "docs/ exists here and in $SLIM_DIR: resolve by hand" >&2; exit 2; fi
    mv "$SLIM_DIR/docs" docs
    echo "docs/ back"
    ;;
  size)
    t=$(tracked); p=$(largest)
    echo "tracked $t bytes, .gpu-kit/p1 $p bytes, margin $((LIMIT - t - p)) bytes"
    ;;
  *) echo "usage: $0 aside|back|size" >&2; exit 1 ;;
esac
