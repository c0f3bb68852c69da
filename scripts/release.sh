#!/usr/bin/env bash
# Release build of proxima-vllm <VERSION> (the VERSION file drives every name). Into dist/release/<VERSION>/:
#   1. wheels/    both wheels (CUDA and CPU), from upstream's hash-checked wheels and a fresh import of the
#                 patch series (proxima_tools.upstream fetch, proxima_tools.series import, proxima_tools.wheels
#                 --verify full);
#   2. images     the CPU and CUDA images, root and non-root (docker/build.sh), when podman or docker exists;
#                 otherwise skipped with a message. The CUDA image needs its NVIDIA base image present
#                 locally (or --cuda-base); the CPU image uses debian:bookworm-slim if present, else the
#                 debootstrap base (scripts/make_base_image.sh). images.txt lists tags, ids and sizes;
#                 --save-images also writes them as OCI archives;
#   3. bundles/   offline install bundles (proxima_tools.bundle), by default the CUDA one without torch
#                 (air-gapped GPU hosts that have torch 2.11.0) and the full CPU one;
#   4. SHA256SUMS over every file above, RELEASE.json (what was built from what, with times), and a
#      CHANGELOG.md entry for VERSION (the "Unreleased" notes become "## [VERSION] - date", plus the
#      artifacts; an existing entry for VERSION is left alone).
#
# Usage: bash scripts/release.sh [options]
#   --out DIR             default dist/release/<VERSION>
#   --tree DIR            where the patch series is imported afresh (default build/vllm-src)
#   --bundles LIST        comma-separated from cpu, cpu-notorch, cuda, cuda-notorch (default
#                         cuda-notorch,cpu); "none" for none
#   --bundle-python X.Y   target Python of the bundles (default: python3's)
#   --split-mb N          bundle part size (default 1900: under 2 GiB, for FAT32 sticks and upload limits)
#   --skip-images         build no images
#   --cpu-base IMG / --cuda-base IMG   base images (see 2.)
#   --save-images         also podman/docker save each image into images/ (~7 GB each)
#   --changelog PATH      the changelog to update (default CHANGELOG.md); --no-changelog to leave it
#   --force               replace an existing --out
# Exit status 0 when everything asked for was built (skipped images are not a failure), 1 otherwise.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { echo "[release $(date +%H:%M:%S)] $*" >&2; }
die() { echo "release: error: $*" >&2; exit 1; }

VERSION=$(tr -d ' \n' < VERSION)
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+([a-z0-9.]*)$ ]] || die "VERSION '$VERSION' is not X.Y.Z[suffix]"
OUT='' TREE=build/vllm-src BUNDLES=cuda-notorch,cpu BUNDLE_PY='' SPLIT_MB=1900 SKIP_IMAGES=0 CPU_BASE='' CUDA_BASE=''
SAVE=0
CHANGELOG=CHANGELOG.md FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --tree) TREE=$2; shift 2 ;;
    --bundles) BUNDLES=$2; shift 2 ;;
    --bundle-python) BUNDLE_PY=$2; shift 2 ;;
    --split-mb) SPLIT_MB=$2; shift 2 ;;
    --skip-images) SKIP_IMAGES=1; shift ;;
    --cpu-base) CPU_BASE=$2; shift 2 ;;
    --cuda-base) CUDA_BASE=$2; shift 2 ;;
    --save-images) SAVE=1; shift ;;
    --changelog) CHANGELOG=$2; shift 2 ;;
    --no-changelog) CHANGELOG=; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
OUT=${OUT:-dist/release/$VERSION}
if [ -e "$OUT" ]; then
  [ "$FORCE" = 1 ] || die "$OUT exists (use --force to replace it)"
  rm -rf "$OUT"
fi
mkdir -p "$OUT/wheels"
OUT=$(cd "$OUT" && pwd)
T0=$(date +%s)
declare -A SECS
step() { SECS[$1]=$(( $(date +%s) - $2 )); }
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  log "warning: the work tree has uncommitted or untracked files; RELEASE.json records $COMMIT+dirty"
  COMMIT="$COMMIT+dirty"
fi
log "proxima-vllm $VERSION (vLLM 0.26.0) into $OUT"
export PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH}   # proxima_tools

# 1. wheels
t=$(date +%s)
log "1/4 wheels: fetching upstream's artifacts (hash-checked against upstream.lock)"
python3 -m proxima_tools.upstream fetch >&2 || die "fetching upstream's artifacts failed"
log "importing the patch series into $TREE"
python3 -m proxima_tools.series import --dest "$TREE" --force >&2 || die "series import failed"
python3 -m proxima_tools.wheels --variant all --patched-tree "$TREE" --out "$OUT/wheels" \
  --verify full --lock upstream.lock > "$OUT/wheels/.built" || die "building the wheels failed"
CPU_WHEEL=$OUT/wheels/vllm-0.26.0+proxima.$VERSION.cpu-cp38-abi3-manylinux_2_28_x86_64.whl
CUDA_WHEEL=$OUT/wheels/vllm-0.26.0+proxima.$VERSION-cp38-abi3-manylinux_2_28_x86_64.whl
{ [ -f "$CPU_WHEEL" ] && [ -f "$CUDA_WHEEL" ]; } || die "build_wheels did not make both wheels: $(cat "$OUT/wheels/.built")"
rm -f "$OUT/wheels/.built"
step wheels "$t"

# 2. images
IMAGES=()
t=$(date +%s)
ENGINE=${CONTAINER_ENGINE:-$(command -v podman >/dev/null && echo podman || { command -v docker >/dev/null && echo docker; } || true)}
if [ "$SKIP_IMAGES" = 1 ]; then
  log "2/4 images: skipped (--skip-images)"
elif [ -z "$ENGINE" ]; then
  log "2/4 images: skipped: neither podman nor docker is installed (Debian: apt-get install -y podman buildah debootstrap runc)"
else
  export CONTAINER_ENGINE=$ENGINE
  # docker/build.sh takes the wheels from dist/: put these exact files there (same bytes, hard links).
  for w in "$CPU_WHEEL" "$CUDA_WHEEL"; do
    mkdir -p dist; rm -f "dist/$(basename "$w")"; ln "$w" "dist/$(basename "$w")" 2>/dev/null || cp "$w" dist/
  done
  if [ -n "$CPU_BASE" ]; then cpu_base=(--base-image "$CPU_BASE")
  elif "$ENGINE" image exists debian:bookworm-slim 2>/dev/null || "$ENGINE" image inspect debian:bookworm-slim >/dev/null 2>&1; then
    cpu_base=(--base-image debian:bookworm-slim)
  else cpu_base=(--debootstrap-base); fi
  for target in openai nonroot; do
    log "2/4 images: CPU ($target, ${cpu_base[*]})"
    img=$(bash docker/build.sh cpu --target "$target" "${cpu_base[@]}") || die "CPU image ($target) failed"
    IMAGES+=("$img")
  done
  cuda_base=${CUDA_BASE:-nvidia/cuda:13.0.2-runtime-ubuntu24.04}
  if [ -n "$CUDA_BASE" ] || "$ENGINE" image inspect "$cuda_base" >/dev/null 2>&1; then
    for target in openai nonroot; do
      log "2/4 images: CUDA ($target, base $cuda_base)"
      img=$(bash docker/build.sh cuda --target "$target" --base-image "$cuda_base") \
        || die "CUDA image ($target) failed"
      IMAGES+=("$img")
    done
  else
    log "2/4 images: CUDA image skipped: its base $cuda_base is not on this host (pull or load it, or pass --cuda-base IMG)"
  fi
  : > "$OUT/images.txt"
  for img in "${IMAGES[@]}"; do
    "$ENGINE" image inspect --format "$img {{.Id}} {{.Size}}" "$img" >> "$OUT/images.txt"
    if [ "$SAVE" = 1 ]; then
      mkdir -p "$OUT/images"
      f=$OUT/images/$(echo "${img##*/}" | tr ':' '-').oci.tar
      log "saving $img to $f"
      "$ENGINE" save --format oci-archive -o "$f" "$img" 2>/dev/null || "$ENGINE" save -o "$f" "$img"
    fi
  done
fi
step images "$t"

# 3. bundles
t=$(date +%s)
if [ "$BUNDLES" != none ]; then
  IFS=, read -r -a kinds <<< "$BUNDLES"
  for kind in "${kinds[@]}"; do
    case "$kind" in
      cpu) args=(--variant cpu --wheel "$CPU_WHEEL") ;;
      cpu-notorch) args=(--variant cpu --wheel "$CPU_WHEEL" --exclude-torch) ;;
      cuda) args=(--variant cuda --wheel "$CUDA_WHEEL") ;;
      cuda-notorch) args=(--variant cuda --wheel "$CUDA_WHEEL" --exclude-torch) ;;
      *) die "--bundles: unknown kind '$kind' (cpu, cpu-notorch, cuda, cuda-notorch)" ;;
    esac
    log "3/4 bundle $kind"
    python3 -m proxima_tools.bundle "${args[@]}" --split-mb "$SPLIT_MB" --out "$OUT/bundles" \
      --proxima-version "$VERSION" ${BUNDLE_PY:+--python-version "$BUNDLE_PY"} >/dev/null \
      || die "bundle $kind failed"
  done
else
  log "3/4 bundles: none asked for"
fi
step bundles "$t"

# 4. checksums, manifest, changelog
log "4/4 SHA256SUMS, RELEASE.json, changelog"
sums=$(mktemp)
(cd "$OUT" && find . -type f ! -name SHA256SUMS ! -name RELEASE.json | sed 's#^\./##' | sort \
  | xargs -r sha256sum) > "$sums"
mv "$sums" "$OUT/SHA256SUMS" && chmod 0644 "$OUT/SHA256SUMS"
python3 - "$OUT" "$VERSION" "$COMMIT" "${SECS[wheels]}" "${SECS[images]}" "${SECS[bundles]}" <<'EOF'
import json, os, sys, time, tomllib
out, version, commit, *secs = sys.argv[1:]
lock = tomllib.load(open("upstream.lock", "rb"))
files = {}
for line in open(os.path.join(out, "SHA256SUMS")):
    sha, name = line.rstrip("\n").split("  ", 1)
    files[name] = {"sha256": sha, "size": os.path.getsize(os.path.join(out, name))}
images = []
if os.path.exists(os.path.join(out, "images.txt")):
    for line in open(os.path.join(out, "images.txt")):
        tag, iid, size = line.split()
        images.append({"tag": tag, "id": iid, "size": int(size)})
json.dump({
    "version": version, "vllm": f"0.26.0+proxima.{version}", "commit": commit,
    "upstream": {k: lock["artifacts"][k]["sha256"] for k in ("sdist", "cuda", "cpu")},
    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "seconds": dict(zip(("wheels", "images", "bundles"), map(int, secs))),
    "files": files, "images": images,
}, open(os.path.join(out, "RELEASE.json"), "w"), indent=2)
EOF
if [ -n "$CHANGELOG" ]; then
  python3 - "$CHANGELOG" "$VERSION" "$OUT" <<'EOF'
import os, re, sys, time
path, version, out = sys.argv[1:]
text = open(path).read() if os.path.exists(path) else "# Changelog\n\n## [Unreleased]\n"
if re.search(rf"^## \[{re.escape(version)}\]", text, re.M):
    print(f"[release] {path} already has an entry for {version}: left as it is", file=sys.stderr)
    sys.exit(0)
m = re.search(r"^## \[Unreleased\][^\n]*\n(.*?)(?=^## \[|\Z)", text, re.M | re.S)
notes = (m.group(1).strip() if m else "") or "- (no notes)"
arts = []
for line in open(os.path.join(out, "SHA256SUMS")):
    sha, name = line.rstrip("\n").split("  ", 1)
    if name.startswith("wheels/") or name.endswith(("/bundle.env", "images.txt")):
        arts.append(f"- `{name}` sha256 `{sha[:16]}…`")
if os.path.exists(os.path.join(out, "images.txt")):
    for line in open(os.path.join(out, "images.txt")):
        tag, iid, size = line.split()
        arts.append(f"- image `{tag}` id `{iid[:12]}` ({int(size) // 10**6} MB)")
entry = (f"## [{version}] - {time.strftime('%Y-%m-%d')}\n\nBuilt on vLLM 0.26.0 "
         f"(`vllm 0.26.0+proxima.{version}`).\n\n{notes}\n\n### Artifacts\n\n" + "\n".join(arts) + "\n\n")
if m:
    text = text[:m.start()] + "## [Unreleased]\n\n" + entry + text[m.end():]
else:
    head, sep, rest = text.partition("\n## ")
    text = head.rstrip("\n") + "\n\n## [Unreleased]\n\n" + entry + (sep.lstrip("\n") + rest if sep else "")
open(path, "w").write(text)
print(f"[release] {path}: added the entry for {version}", file=sys.stderr)
EOF
fi
log "done in $(( $(date +%s) - T0 )) s (wheels ${SECS[wheels]} s, images ${SECS[images]} s, bundles ${SECS[bundles]} s): $OUT"
(cd "$OUT" && du -sh . && echo "$(wc -l < SHA256SUMS) files in SHA256SUMS") >&2
echo "$OUT"
