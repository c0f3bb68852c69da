#!/usr/bin/env bash
# Builds a proxima-vllm image from the repository root with podman (or docker with BuildKit), timing it and
# printing its size. The wheel must be in dist/ first (PYTHONPATH=tools python3 -m proxima_tools.wheels --variant cpu|cuda).
#
# Usage: bash docker/build.sh cpu|cuda [options] [-- extra build arguments]
#   --tag TAG            image name (default proxima-vllm:<VERSION>-cpu, proxima-vllm:<VERSION>-cuda13.0)
#   --target T           openai (default, runs as root) or nonroot (UID 2000); nonroot adds -nonroot to the tag
#   --base-image IMG     the FROM image (default debian:bookworm-slim / nvidia/cuda:13.0.2-runtime-ubuntu24.04)
#   --debootstrap-base   use (and make if missing) the debootstrap image of scripts/make_base_image.sh instead:
#                        for hosts with no registry; for cuda it is a stand-in that tests the Dockerfile's logic
#   --no-cache           rebuild every layer
# Environment: CONTAINER_ENGINE (podman|docker, default: podman if installed), PIP_CA_BUNDLE (a CA bundle
# for pip inside the build, default /etc/ssl/certs/ca-certificates.crt when it exists; "none" to pass none),
# OCI_RUNTIME (podman's --runtime; default runc on hosts with hybrid cgroups, where crun fails).
# Prints the image name on stdout; progress and the build log go to stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { echo "[docker/build $(date +%H:%M:%S)] $*" >&2; }
die() { echo "docker/build: error: $*" >&2; exit 1; }

VARIANT=${1:-}
case "$VARIANT" in
  cpu|cuda) shift ;;
  -h|--help|"") sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; [ -n "$VARIANT" ]; exit $? ;;
  *) die "first argument must be cpu or cuda, not '$VARIANT'" ;;
esac
VERSION=$(tr -d ' \n' < VERSION)
TAG='' TARGET=openai BASE='' DEBOOTSTRAP=0 EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --target) TARGET=$2; shift 2 ;;
    --base-image) BASE=$2; shift 2 ;;
    --debootstrap-base) DEBOOTSTRAP=1; shift ;;
    --no-cache) EXTRA+=(--no-cache); shift ;;
    --) shift; EXTRA+=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$TARGET" in openai|nonroot) ;; *) die "--target must be openai or nonroot" ;; esac

if [ "$VARIANT" = cpu ]; then
  WHEEL=vllm-0.26.0+proxima.$VERSION.cpu-cp38-abi3-manylinux_2_28_x86_64.whl
  TAG=${TAG:-proxima-vllm:$VERSION-cpu}
else
  WHEEL=vllm-0.26.0+proxima.$VERSION-cp38-abi3-manylinux_2_28_x86_64.whl
  TAG=${TAG:-proxima-vllm:$VERSION-cuda13.0}
fi
[ "$TARGET" = nonroot ] && [[ "$TAG" != *-nonroot ]] && TAG=$TAG-nonroot
[ -f "dist/$WHEEL" ] || die "dist/$WHEEL not found: run PYTHONPATH=tools python3 -m proxima_tools.wheels --variant $VARIANT"

ENGINE=${CONTAINER_ENGINE:-}
if [ -z "$ENGINE" ]; then
  if command -v podman >/dev/null; then ENGINE=podman
  elif command -v docker >/dev/null; then ENGINE=docker
  else die "neither podman nor docker found (Debian: apt-get install -y podman buildah)"; fi
fi
command -v "$ENGINE" >/dev/null || die "$ENGINE not found"

ARGS=(build -f "docker/Dockerfile.$VARIANT" -t "$TAG" --target "$TARGET"
      --build-arg "PROXIMA_VERSION=$VERSION" --build-arg "VLLM_WHEEL=$WHEEL"
      --build-arg "VLLM_WHEEL_SHA256=$(sha256sum "dist/$WHEEL" | cut -d' ' -f1)")
GLOBAL=()
if [ "$ENGINE" = podman ]; then
  # crun refuses hybrid cgroup v1/v2 hosts ("cgroups in hybrid mode not supported"); runc copes.
  RUNTIME=${OCI_RUNTIME:-}
  if [ -z "$RUNTIME" ] && [ -d /sys/fs/cgroup/unified ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
    command -v runc >/dev/null || die "this host has hybrid cgroups, which crun does not support: apt-get install -y runc"
    RUNTIME=runc
  fi
  [ -n "$RUNTIME" ] && GLOBAL+=(--runtime "$RUNTIME")
  ARGS+=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --layers)
else
  export DOCKER_BUILDKIT=1
fi
CA=${PIP_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ "$CA" != none ] && [ -s "$CA" ]; then ARGS+=(--secret "id=pip_ca,src=$CA"); fi

if [ "$DEBOOTSTRAP" = 1 ]; then
  [ -z "$BASE" ] || die "--base-image and --debootstrap-base exclude each other"
  BASE=$(bash scripts/make_base_image.sh)
  [ "$VARIANT" = cuda ] && log "note: $BASE stands in for the CUDA base image: the image will not see a GPU"
fi
[ -n "$BASE" ] && ARGS+=(--build-arg "BASE_IMAGE=$BASE")

log "$ENGINE ${GLOBAL[*]} ${ARGS[*]} ${EXTRA[*]} ."
t0=$(date +%s)
"$ENGINE" "${GLOBAL[@]}" "${ARGS[@]}" "${EXTRA[@]}" . >&2 || die "the $VARIANT image build failed (log above)"
secs=$(( $(date +%s) - t0 ))
size=$("$ENGINE" image inspect --format '{{.Size}}' "$TAG")
log "built $TAG in ${secs} s: $(( size / 1000000 )) MB"
echo "$TAG"
