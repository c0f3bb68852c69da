#!/usr/bin/env bash
# Makes a minimal Debian base image with debootstrap and imports it into podman, for hosts that cannot pull
# from a container registry. It stands in for `debian:bookworm-slim` (the CPU image's base) and, for testing the
# CUDA Dockerfile's logic, for `nvidia/cuda:*` (see docs/containers.md).
#
# Usage: bash scripts/make_base_image.sh [--tag TAG] [--suite SUITE] [--mirror URL] [--include PKG,...] [--force]
#   --tag      image name (default localhost/proxima-debian:bookworm)
#   --suite    Debian release (default bookworm: Python 3.11, like the host)
#   --mirror   Debian mirror (default: the first Debian URI in /etc/apt/sources.list*, else deb.debian.org)
#   --include  extra packages for debootstrap (comma-separated; default none: a `minbase` system)
#   --force    rebuild even if the image exists
# Needs root, debootstrap and podman (apt-get install -y debootstrap podman). Prints the image name on stdout.
set -euo pipefail
TAG=localhost/proxima-debian:bookworm
SUITE=bookworm
MIRROR=
INCLUDE=
FORCE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) TAG=$2; shift 2 ;;
    --suite) SUITE=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --include) INCLUDE=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make_base_image: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "[make_base_image $(date +%H:%M:%S)] $*" >&2; }
die() { echo "make_base_image: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install -y debootstrap"
command -v podman >/dev/null || die "podman not found: apt-get install -y podman"

if [ "$FORCE" = 0 ] && podman image exists "$TAG"; then
  log "$TAG exists (use --force to rebuild)"
  echo "$TAG"
  exit 0
fi

if [ -z "$MIRROR" ]; then
  # The mirror apt already uses here: deb822 "URIs:" lines or one-line "deb URL suite" entries.
  MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | sed -nE 's#^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?([a-z]+://[^[:space:]]*/debian)/?([[:space:]].*)?$#\3#p' \
    | head -1 || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi

t0=$(date +%s)
WORK=$(mktemp -d /var/tmp/proxima-base.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOTFS=$WORK/rootfs
log "debootstrap --variant=minbase $SUITE from $MIRROR${INCLUDE:+ (+ $INCLUDE)}"
if ! debootstrap --variant=minbase ${INCLUDE:+--include="$INCLUDE"} "$SUITE" "$ROOTFS" "$MIRROR" \
    > "$WORK/debootstrap.log" 2>&1; then
  tail -30 "$WORK/debootstrap.log" >&2
  die "debootstrap failed (log above)"
fi

# Trim it like the official slim images: no apt lists or caches, no docs or man pages.
log "trimming the root file system"
cat > "$ROOTFS/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
SOURCES
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/var/log/*.log \
  "$ROOTFS"/tmp/* 2>/dev/null || true
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/proxima-slim" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
DPKG
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' > "$ROOTFS/etc/apt/apt.conf.d/90proxima-slim"
: > "$ROOTFS/etc/machine-id"

log "importing into podman as $TAG"
tar --numeric-owner --xattrs -C "$ROOTFS" -cf - . | podman import \
  --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "LABEL org.opencontainers.image.description=debootstrap --variant=minbase $SUITE ($MIRROR)" \
  - "$TAG" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$TAG")
log "done in $(( $(date +%s) - t0 )) s: $TAG, $(( size / 1000000 )) MB"
echo "$TAG"
