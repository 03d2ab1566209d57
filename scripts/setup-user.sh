#!/usr/bin/env bash
# Prepares rootless Podman for MCP-Forge, for the non-root user who runs it
# (a desktop user adding the server to Claude Desktop, Claude Code or
# Cursor). Run as that user: `make setup-user`. Safe to run again: each step
# checks first.
#
# Nothing here needs root. What does is named, never done:
#   - installing packages:        apt-get install podman runc uidmap catatonit fuse-overlayfs slirp4netns
#   - a sub-id range, if missing:  usermod --add-subuids 100000-165535 --add-subgids 100000-165535 USER
#   - the sandbox images: they are built by root (debootstrap and chroot need
#     it) and copied into the user's storage, which is separate from root's:
#         sudo make images-archive            # podman save of root's images to $IMAGES_ARCHIVE
#         make setup-user IMAGES_ARCHIVE=...  # podman load as the user
#
# Environment: IMAGES_ARCHIVE (a `podman save -m` archive of the images),
# FORGE_PYTHON_IMAGE / FORGE_R_IMAGE (image names).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup-user] %s\n' "$*" >&2; }
die() { printf '[setup-user] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" != 0 ] || die "run this as the user who will run mcp-forge, not as root (root uses: make setup)"
user=$(id -un)
uid=$(id -u)
images=("${FORGE_PYTHON_IMAGE:-mcp-forge/python:3.11}" "${FORGE_R_IMAGE:-mcp-forge/r:4.2}")

# --- packages (installing them is the one thing that needs root) ---
missing=()
for p in podman runc uidmap catatonit fuse-overlayfs slirp4netns; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] || die "missing packages: ${missing[*]}; as root run: apt-get install ${missing[*]}"

# --- runtime directory: where the user's Podman socket lives ---
[ -n "${XDG_RUNTIME_DIR:-}" ] || die "XDG_RUNTIME_DIR is not set. Log in through a session that sets it (desktop or ssh with pam_systemd), or have root create /run/user/$uid (owner $user, mode 0700) and export XDG_RUNTIME_DIR=/run/user/$uid"
[ -d "$XDG_RUNTIME_DIR" ] && [ -O "$XDG_RUNTIME_DIR" ] || die "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR is not a directory you own"
state=${XDG_STATE_HOME:-$HOME/.local/state}/mcp-forge
config=${XDG_CONFIG_HOME:-$HOME/.config}/containers
data=${XDG_DATA_HOME:-$HOME/.local/share}
mkdir -p "$state" "$config" "$XDG_RUNTIME_DIR/mcp-forge"

# --- sub-ids: each sandbox's private user namespace maps 65536 ids onto them ---
for f in /etc/subuid /etc/subgid; do
  n=$(awk -F: -v u="$user" -v i="$uid" '$1==u || $1==i {s+=$3} END {print s+0}' "$f" 2>/dev/null || echo 0)
  [ "$n" -ge 65536 ] || die "$f gives $user $n sub-ids, 65536 are needed. As root run: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $user (a range no other user has; see /etc/subuid), then as $user: podman system migrate"
done
for b in /usr/bin/newuidmap /usr/bin/newgidmap; do
  if [ ! -u "$b" ] && ! getcap "$b" 2>/dev/null | grep -q cap_set; then
    die "$b is neither setuid root nor has file capabilities; as root run: chmod u+s $b"
  fi
done

# --- hard limits: sandboxes get nofile/nproc rlimits within the user's own ---
hn=$(ulimit -Hn) hu=$(ulimit -Hu)
if [ "$hn" != unlimited ] && [ "$hn" -lt 1024 ]; then die "your hard nofile limit is $hn (< 1024, execution.nofile); raise it in /etc/security/limits.d/ (as root)"; fi
if [ "$hu" != unlimited ] && [ "$hu" -lt 4096 ]; then log "warning: your hard nproc limit is $hu; keep execution.max_pids below it"; fi

# --- the user's containers.conf: runc where crun cannot run, sane rlimits ---
cgroup2=0
[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] && cgroup2=1
user_systemd=0
if command -v systemctl >/dev/null && systemctl --user show-environment >/dev/null 2>&1; then user_systemd=1; fi
conf=$config/containers.conf
marker='# Written by MCP-Forge `make setup-user`.'
want="$marker
[engine]"
# crun fails on cgroups v1 hybrid hosts ("cgroups in hybrid mode not supported").
[ $cgroup2 = 1 ] || want+=$'\nruntime = "runc"'
if [ $user_systemd = 0 ]; then
  # No user systemd: no systemd cgroup manager and no journal of the user's.
  want+=$'\ncgroup_manager = "cgroupfs"\nevents_logger = "file"'
fi
want+="

[containers]
default_ulimits = [\"nofile=1024:1024\", \"nproc=$([ "$hu" = unlimited ] && echo 4096 || echo $((hu < 4096 ? hu : 4096))):$([ "$hu" = unlimited ] && echo 4096 || echo $((hu < 4096 ? hu : 4096)))\"]"
restart=0
if [ ! -e "$conf" ] || head -1 "$conf" | grep -qF "$marker"; then
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    log "writing $conf"
    printf '%s\n' "$want" >"$conf"
    restart=1
  fi
else
  log "warning: $conf exists and is yours; make sure it has what MCP-Forge needs:"
  printf '%s\n' "$want" | sed 's/^/    /' >&2
fi

# --- storage: native overlay. vfs (Podman's fallback when /dev/fuse is
# root-only) would copy a whole image for every container with a private
# user namespace. The driver can only be chosen before the storage exists.
sconf=$config/storage.conf
if [ ! -e "$sconf" ] && [ ! -d "$data/containers/storage" ]; then
  log "writing $sconf (overlay driver)"
  printf '%s\n[storage]\ndriver = "overlay"\n' "$marker" >"$sconf"
elif [ -d "$data/containers/storage/vfs" ] && [ ! -d "$data/containers/storage/overlay" ]; then
  log "warning: your Podman storage uses vfs: every sandbox start copies its image. To switch: podman system reset (deletes your images and containers), write [storage] driver = \"overlay\" to $sconf, run make setup-user again"
fi

# --- the user's Podman API socket ---
sock=$XDG_RUNTIME_DIR/podman/podman.sock
pidfile=$XDG_RUNTIME_DIR/mcp-forge/podman.pid
svclog=$state/podman-service.log
ping() { curl -fsS --max-time 5 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }
# Polls the socket (20 s at most), giving up early if the process named by
# $1 (a pid) has exited.
wait_ping() {
  for _ in $(seq 1 100); do
    ping && return 0
    [ -z "${1:-}" ] || kill -0 "$1" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
if [ $user_systemd = 1 ]; then
  [ $restart = 0 ] || systemctl --user stop podman.service podman.socket >/dev/null 2>&1 || true
  log "enabling podman.socket in your systemd (systemctl --user)"
  systemctl --user enable --now podman.socket >/dev/null
  wait_ping || die "podman.socket did not answer on $sock; see: systemctl --user status podman.socket"
else
  if [ $restart = 1 ] && [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    log "restarting your Podman service (pid $(cat "$pidfile")) to apply $conf"
    kill "$(cat "$pidfile")" || true
    for _ in $(seq 1 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.2; done
  fi
  if ! ping; then
    # No user systemd (a container, a minimal host): a background service,
    # detached from this shell, with its pid and log in the user's dirs.
    log "starting your Podman service on $sock (log: $svclog)"
    mkdir -p "$(dirname "$sock")"
    (cd / && exec setsid nohup podman system service --time=0 "unix://$sock" </dev/null >>"$svclog" 2>&1) &
    echo $! >"$pidfile"
    wait_ping $! || die "your Podman service did not answer on $sock; see $svclog"
  fi
fi

# --- the images, in the user's own storage ---
have_all=1
for img in "${images[@]}"; do podman image exists "$img" || have_all=0; done
if [ $have_all = 0 ]; then
  if [ -n "${IMAGES_ARCHIVE:-}" ]; then
    [ -r "$IMAGES_ARCHIVE" ] || die "IMAGES_ARCHIVE=$IMAGES_ARCHIVE is not readable by $user"
    log "loading the images from $IMAGES_ARCHIVE into your storage"
    podman load -q -i "$IMAGES_ARCHIVE" >&2
  else
    die "the sandbox images (${images[*]}) are not in your Podman storage. Building them needs root (debootstrap, chroot), so copy root's: as root run \`make images-archive\` (writes /var/tmp/mcp-forge-images.tar), then: make setup-user IMAGES_ARCHIVE=/var/tmp/mcp-forge-images.tar"
  fi
  for img in "${images[@]}"; do podman image exists "$img" || die "$img is still missing after loading $IMAGES_ARCHIVE"; done
fi

# --- warm the sandbox's id mapping: the first container of an image with a
# private user namespace makes an id-shifted copy of its top layer (about
# 30 s for the Python image); do it now, not on the first run.
for img in "${images[@]}"; do
  log "preparing $img for a private user namespace"
  podman run --rm --network none --uidmap 0:1:65536 --gidmap 0:1:65536 --entrypoint true "$img" >&2
done

log "done: rootless Podman on $sock with ${images[*]}"
# Two of the server's defaults fail closed for a non-root user; it must
# choose to run without them, knowingly, in its forge.toml.
log "a non-root user cannot loop-mount the per-workspace filesystem: set [volumes] enforce_quota = false (a periodic walk then bounds workspaces)"
if [ $cgroup2 = 0 ]; then
  log "this host has cgroups v1: rootless Podman cannot enforce memory/CPU/pids limits; set [security] enforce_resource_limits = false to run without them (every result says so), or move to cgroups v2 with delegation"
fi
log "check with: bin/mcp-forge doctor"
