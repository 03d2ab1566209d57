#!/usr/bin/env bash
# Builds mcp-forge-agent's image: FROM scratch, the static binary from bin/
# (`make build`) alone, offline. Sandbox pods copy the agent from it in an
# init container (`/mcp-forge-agent install ...`), so a user's image needs
# nothing of the core's. The tag is the binary's hash, so a forge.toml
# names exactly the agent it runs; it is tagged :dev too (agent_image's
# default). The last line of stdout is the image's name.
#
#   images/agent/build.sh [BIN_DIR]        (default: bin)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-bin}
log() { printf '[agent-image] %s\n' "$*" >&2; }
die() { printf '[agent-image] error: %s\n' "$*" >&2; exit 1; }
[ -x "$bin/mcp-forge-agent" ] || die "$bin/mcp-forge-agent is missing: run make build first"
command -v podman >/dev/null || die "podman not found; run: make setup"
file "$bin/mcp-forge-agent" 2>/dev/null | grep -q 'statically linked' ||
  ldd "$bin/mcp-forge-agent" 2>&1 | grep -q 'not a dynamic executable' ||
  die "$bin/mcp-forge-agent is not static: build it with CGO_ENABLED=0 (make build does)"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
install -m 0555 "$bin/mcp-forge-agent" "$ctx/mcp-forge-agent"
printf 'FROM scratch\nCOPY mcp-forge-agent /mcp-forge-agent\nUSER 65532:65532\nENTRYPOINT ["/mcp-forge-agent"]\n' >"$ctx/Containerfile"
tag=$(sha256sum "$ctx/mcp-forge-agent" | cut -c1-12)
name=localhost/mcp-forge/agent:$tag
if podman image exists "$name"; then
  log "$name is built"
else
  log "building $name"
  podman build -q -t "$name" "$ctx" >/dev/null || die "podman build of $name failed"
fi
podman tag "$name" localhost/mcp-forge/agent:dev
printf '%s\n' "$name"
