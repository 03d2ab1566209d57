#!/usr/bin/env bash
# Builds the core's own image (deploy/): the server and its plugins from
# bin/ (`make build`, static binaries), Debian's CA bundle, and a passwd
# naming the non-root user 65532 it runs as. FROM scratch, offline, no
# shell. The tag is the content's hash, so a deployment names exactly the
# binaries it runs; the last line of stdout is the image's name.
#
#   images/core/build.sh [BIN_DIR]        (default: bin)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-bin}
log() { printf '[core-image] %s\n' "$*" >&2; }
die() { printf '[core-image] error: %s\n' "$*" >&2; exit 1; }
[ -x "$bin/mcp-forge" ] || die "$bin/mcp-forge is missing: run make build first"
command -v podman >/dev/null || die "podman not found; run: make setup"
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || die "$ca is missing: apt-get install ca-certificates"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/usr/lib/mcp-forge" "$ctx/etc/ssl/certs"
cp "$bin/mcp-forge" "$bin"/mcp-forge-plugin-* "$ctx/usr/lib/mcp-forge/"
cp "$ca" "$ctx/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/nonexistent:/sbin/nologin\nforge:x:65532:65532:mcp-forge:/var/lib/mcp-forge:/sbin/nologin\n' >"$ctx/etc/passwd"
printf 'root:x:0:\nforge:x:65532:\n' >"$ctx/etc/group"
cp images/core/Containerfile "$ctx/Containerfile"
tag=$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
name=localhost/mcp-forge/core:$tag
if podman image exists "$name"; then
  log "$name is built"
else
  log "building $name"
  version=$("$bin/mcp-forge" version 2>/dev/null | head -n 1)
  podman build -q --label "org.opencontainers.image.version=$version" -t "$name" "$ctx" >/dev/null ||
    die "podman build of $name failed"
fi
podman tag "$name" localhost/mcp-forge/core:dev
printf '%s\n' "$name"
