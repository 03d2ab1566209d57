#!/usr/bin/env bash
# Installs gVisor's runsc, pinned, for security.isolation = "gvisor": built
# from the Go module proxy (Debian's runsc is a 2022 snapshot without the
# systrap platform, and these hosts have no /dev/kvm) into a cache keyed by
# version outside the repository, then copied to FORGE_RUNSC
# (/usr/local/lib/mcp-forge/runsc, security.runsc's default). Skipped when
# the pinned build is installed already. About 7 minutes of compiling on two
# cores the first time; scripts/setup.sh runs it, and make test in the
# background of the other legs.
#   FORGE_GVISOR_VERSION  the gvisor.dev/gvisor module version (default: the
#                         pin in scripts/gvisor/version, which scripts/kube/build.sh
#                         builds the containerd shim from too)
#   FORGE_GVISOR_CACHE    the build cache (/var/cache/mcp-forge/gvisor)
set -euo pipefail
log() { printf '[gvisor] %s\n' "$*" >&2; }
die() { printf '[gvisor] error: %s\n' "$*" >&2; exit 1; }

version=${FORGE_GVISOR_VERSION:-$(cat "$(dirname "$0")/version")}
[ -n "$version" ] || die "no gVisor version: $(dirname "$0")/version is empty"
cache=${FORGE_GVISOR_CACHE:-/var/cache/mcp-forge/gvisor}/${version#v0.0.0-}
dest=${FORGE_RUNSC:-/usr/local/lib/mcp-forge/runsc}
built=$cache/runsc

runs() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q '^runsc version'; }

if runs "$dest" && [ -f "$dest.version" ] && [ "$(cat "$dest.version")" = "$version" ]; then
  log "runsc $version is installed at $dest"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "runsc $version is not installed at $dest; run: sudo make setup"
if ! runs "$built"; then
  log "building runsc $version from the Go module proxy into $cache (about 7 minutes the first time)"
  mkdir -p "$cache"
  # The repository's GOFLAGS (Podman build tags) and go.work do not apply.
  env GOWORK=off GOFLAGS= CGO_ENABLED=0 GOTOOLCHAIN=local GOBIN="$cache" PATH="$PATH:/usr/local/go/bin" \
    go install "gvisor.dev/gvisor/runsc@$version" || die "go install gvisor.dev/gvisor/runsc@$version failed"
  runs "$built" || die "the runsc built at $built does not run"
fi
mkdir -p "$(dirname "$dest")"
install -m 0755 "$built" "$dest.new"
mv -f "$dest.new" "$dest"
printf '%s\n' "$version" >"$dest.version"
log "installed runsc $version at $dest"
