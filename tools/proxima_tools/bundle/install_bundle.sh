#!/usr/bin/env bash
# Installer of a proxima-vllm offline bundle (made by proxima_tools.bundle, which copies this file into
# the bundle as install.sh). Needs no network: it
#   1. checks every file against SHA256SUMS and refuses the bundle on any mismatch or missing file;
#   2. joins wheels.tar.part-* (split bundles), checks the joined tar's sha256 and unpacks it to a temp dir;
#   3. makes the venv if it does not exist (with --python, default python3), and checks its Python version
#      and glibc against the bundle's;
#   4. bundles made with --exclude-torch: checks the venv already has torch of the bundle's version;
#   5. pip install --no-index --find-links WHEELS -r requirements.txt (pip's config files and PIP_* variables
#      are ignored, so nothing but the bundle is used), then checks `import vllm_proxima` and the version.
#
# Usage: bash install.sh --venv DIR [--python PYTHON] [--bundle DIR] [--verify-only] [--pip-args "..."]
#   --venv DIR       the virtual environment to install into (made if missing)
#   --python PYTHON  interpreter for a new venv (default python3; must be the bundle's X.Y)
#   --bundle DIR     the bundle folder (default: this script's folder)
#   --verify-only    check the checksums (and join/check parts), install nothing
#   --pip-args ARGS  extra arguments for pip install (e.g. "--force-reinstall")
# Exit status: 0 installed (or verified), 1 refused or failed (message on stderr), 2 usage.
set -euo pipefail
BUNDLE=$(cd "$(dirname "$0")" && pwd)
VENV='' PYTHON=python3 VERIFY_ONLY=0 PIP_ARGS=''
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) VENV=$2; shift 2 ;;
    --python) PYTHON=$2; shift 2 ;;
    --bundle) BUNDLE=$(cd "$2" && pwd); shift 2 ;;
    --verify-only) VERIFY_ONLY=1; shift ;;
    --pip-args) PIP_ARGS=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "[install $(date +%H:%M:%S)] $*" >&2; }
die() { echo "install: error: $*" >&2; exit 1; }
[ "$VERIFY_ONLY" = 1 ] || [ -n "$VENV" ] || { echo "install: error: --venv DIR is required" >&2; exit 2; }
command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
case "$VENV" in /*|"") ;; *) VENV=$PWD/$VENV ;; esac   # relative to where we were called from

cd "$BUNDLE"
[ -f SHA256SUMS ] || die "$BUNDLE has no SHA256SUMS: not a bundle, or an incomplete copy"
[ -f bundle.env ] || die "$BUNDLE has no bundle.env: not a bundle, or an incomplete copy"
field() { sed -n "s/^$1=//p" bundle.env | head -1; }

# 1. checksums of everything SHA256SUMS lists (parts included); a missing file is a failure too.
log "checking $(wc -l < SHA256SUMS) files against SHA256SUMS"
if ! bad=$(sha256sum --check --strict --quiet SHA256SUMS 2>&1); then
  printf '%s\n' "$bad" | sed 's/^/  /' >&2
  die "bundle $BUNDLE is corrupt or incomplete (above): refusing to install; copy it again"
fi
# Files the bundle has but SHA256SUMS does not list would be silently used by pip: refuse them too.
unlisted=$(find . -type f ! -name SHA256SUMS ! -path './.*' | sed 's#^\./##' | sort \
  | comm -23 - <(sed 's/^[0-9a-f]*  //' SHA256SUMS | sort) || true)
[ -z "$unlisted" ] || die "files not in SHA256SUMS: ${unlisted//$'\n'/ }: refusing to install"

FORMAT=$(field BUNDLE_FORMAT)
[ "$FORMAT" = 1 ] || die "bundle format '$FORMAT' is not one this installer knows (1)"
VLLM_VERSION=$(field VLLM_VERSION)
PY_WANT=$(field PYTHON_VERSION)
GLIBC_MIN=$(field GLIBC_MIN)
EXCLUDE_TORCH=$(field EXCLUDE_TORCH)
TORCH_VERSION=$(field TORCH_VERSION)
PAYLOAD=$(field PAYLOAD)
PAYLOAD_SHA256=$(field PAYLOAD_SHA256)
read -r -a PARTS <<< "$(field PARTS)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/proxima-bundle.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# 2. the wheels: a folder, or parts to join.
if [ -n "$PAYLOAD" ]; then
  [ "${#PARTS[@]}" -gt 0 ] || die "bundle.env names payload $PAYLOAD but no parts"
  for p in "${PARTS[@]}"; do [ -f "$p" ] || die "part $p is missing"; done
  log "joining ${#PARTS[@]} parts into $PAYLOAD"
  cat "${PARTS[@]}" > "$WORK/$PAYLOAD"
  got=$(sha256sum "$WORK/$PAYLOAD" | cut -d' ' -f1)
  [ "$got" = "$PAYLOAD_SHA256" ] || die "joined $PAYLOAD has sha256 $got, expected $PAYLOAD_SHA256: refusing"
  tar -xf "$WORK/$PAYLOAD" -C "$WORK" --no-same-owner
  rm -f "$WORK/$PAYLOAD"
  WHEELS=$WORK/wheels
else
  WHEELS=$BUNDLE/wheels
fi
[ -d "$WHEELS" ] || die "no wheels folder in the bundle"
n=$(find "$WHEELS" -maxdepth 1 -name '*.whl' | wc -l)
[ "$n" = "$(field WHEEL_COUNT)" ] || die "$n wheels found, bundle.env says $(field WHEEL_COUNT)"
log "bundle OK: vllm $VLLM_VERSION, $n wheels, CPython $PY_WANT, glibc >= $GLIBC_MIN$([ "$EXCLUDE_TORCH" = 1 ] && echo ", without torch")"
if [ "$VERIFY_ONLY" = 1 ]; then
  echo "verified"
  exit 0
fi

# 3. the venv.
if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found: pass --python /path/to/python$PY_WANT"
  log "creating the venv $VENV with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv "$VENV" || die "could not create $VENV (Debian/Ubuntu: apt-get install python$PY_WANT-venv)"
fi
PY=$VENV/bin/python
py_have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$py_have" = "$PY_WANT" ] || die "$VENV has Python $py_have, the bundle's wheels are for $PY_WANT"
glibc_have=$("$PY" -c 'import platform; print(platform.libc_ver()[1] or "0")')
"$PY" - "$glibc_have" "$GLIBC_MIN" <<'EOF' || die "this host's glibc $glibc_have is older than the bundle needs ($GLIBC_MIN)"
import sys
have, need = (tuple(int(x) for x in v.split(".")[:2]) for v in sys.argv[1:3])
sys.exit(0 if have >= need else 1)
EOF

# Nothing but the bundle: no pip config files, no PIP_* settings from the environment.
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# 4. torch, for bundles without it.
if [ "$EXCLUDE_TORCH" = 1 ]; then
  have=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
  [ -n "$have" ] || die "this bundle has no torch and $VENV has none: install torch $TORCH_VERSION first, or use a bundle made without --exclude-torch"
  [ "${have%%+*}" = "$TORCH_VERSION" ] || die "$VENV has torch $have, vLLM 0.26.0 needs $TORCH_VERSION"
  log "using the torch $have already in $VENV"
fi

# 5. install and check.
log "pip install --no-index --find-links (vllm $VLLM_VERSION and $((n - 1)) dependencies)"
# shellcheck disable=SC2086
"$PY" -m pip install --no-index --find-links "$WHEELS" --progress-bar off -q $PIP_ARGS \
  -r requirements.txt || die "pip install failed (above)"
got=$("$PY" -c 'import importlib.metadata as m, vllm_proxima; print(m.version("vllm"))') \
  || die "import vllm_proxima failed after the install"
[ "$got" = "$VLLM_VERSION" ] || die "installed vllm is $got, expected $VLLM_VERSION"
log "installed vllm $got into $VENV ($VENV/bin/vllm serve MODEL_DIR ...)"
echo "installed $got"
