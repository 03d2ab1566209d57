#!/usr/bin/env bash
# Builds the sandbox images offline: a Debian bookworm minbase rootfs made by
# debootstrap, packages installed with apt in a chroot, then `podman import`.
# No container registry is needed. An image whose recipe (this script plus its
# package list) is unchanged is skipped, so running this again is cheap.
#
#   images/build.sh [python] [r]        (default: both)
#
# Environment: FORGE_IMAGE_CACHE (work directory, default
# /var/cache/mcp-forge/images), FORGE_DEBIAN_MIRROR, FORGE_IMAGE_FORCE=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${FORGE_IMAGE_CACHE:-/var/cache/mcp-forge/images}
mirror=${FORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm

declare -A tags=([python]="mcp-forge/python:3.11" [r]="mcp-forge/r:4.2")
declare -A envs=(
  [python]="MPLBACKEND=Agg PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1"
  [r]="R_LIBS_USER=/tmp/Rlib"
)

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "building images needs root (debootstrap and chroot); run: sudo make images"
for c in debootstrap podman sha256sum; do
  command -v "$c" >/dev/null || die "$c not found; run: make setup"
done

packages() { grep -v '^\s*#' "$here/$1/packages.txt" | grep -v '^\s*$' | tr '\n' ' '; }

recipe_hash() {
  cat "$here/build.sh" "$here/$1/packages.txt" | sha256sum | cut -c1-16
}

base_rootfs() {
  local base=$cache/base-$suite
  if [ -f "$base/.complete" ]; then echo "$base"; return; fi
  log "debootstrap --variant=minbase $suite (about 30 s)"
  rm -rf "$base"; mkdir -p "$cache"
  debootstrap --variant=minbase "$suite" "$base" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $cache/debootstrap.log"
  touch "$base/.complete"
  echo "$base"
}

cleanup_mounts() {
  local root=$1
  for m in dev/pts dev proc; do
    mountpoint -q "$root/$m" && umount -l "$root/$m" || true
  done
}

build_one() {
  local name=$1 tag=${tags[$1]} hash
  hash=$(recipe_hash "$name")
  local have
  have=$(podman image inspect "$tag" --format '{{index .Labels "io.mcp-forge.recipe"}}' 2>/dev/null || true)
  if [ "$have" = "$hash" ] && [ "${FORGE_IMAGE_FORCE:-0}" != 1 ]; then
    log "$tag is up to date (recipe $hash)"
    return
  fi
  local base root start=$SECONDS
  base=$(base_rootfs)
  root=$cache/rootfs-$name
  log "building $tag (recipe $hash)"
  cleanup_mounts "$root" 2>/dev/null || true
  rm -rf "$root"; cp -a "$base" "$root"; rm -f "$root/.complete"
  trap "cleanup_mounts '$root'" EXIT
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
  echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
  local pkgs; pkgs=$(packages "$name")
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive LC_ALL=C sh -c \
    "apt-get update -q && apt-get install -y -q --no-install-recommends $pkgs" \
    >"$cache/$name-apt.log" 2>&1 || die "apt-get install in the $name rootfs failed; see $cache/$name-apt.log"
  chroot "$root" sh -c 'groupadd -g 1000 sandbox && useradd -u 1000 -g 1000 -m -d /home/sandbox -s /bin/sh sandbox'
  if [ "$name" = python ]; then
    # Build matplotlib's font cache now so the first plot in a sandbox is fast.
    mkdir -p "$root/opt/mcp-forge/mpl"
    chroot "$root" env MPLCONFIGDIR=/opt/mcp-forge/mpl MPLBACKEND=Agg python3 -c 'import matplotlib.pyplot' >/dev/null 2>&1 || true
    chmod -R a+rX "$root/opt/mcp-forge"
  fi
  cleanup_mounts "$root"; trap - EXIT
  rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old
  local changes=(--change "USER=1000:1000" --change "WORKDIR=/home/sandbox"
    --change "ENV=HOME=/tmp" --change "LABEL=io.mcp-forge.recipe=$hash"
    --change "LABEL=io.mcp-forge.image=$name" --change "LABEL=io.mcp-forge.packages=$(echo $pkgs | tr ' ' ',')")
  local e; for e in ${envs[$name]}; do changes+=(--change "ENV=$e"); done
  tar -C "$root" -c . | podman import "${changes[@]}" - "$tag" >/dev/null \
    || die "podman import of $tag failed"
  rm -rf "$root"
  log "built $tag in $((SECONDS - start)) s ($(podman image inspect "$tag" --format '{{.Size}}') bytes)"
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(python r)
for t in "${targets[@]}"; do
  [ -n "${tags[$t]:-}" ] || die "unknown image '$t' (known: ${!tags[*]})"
  build_one "$t"
done
