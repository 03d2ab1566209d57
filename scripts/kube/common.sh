# Shared by scripts/kube-up.sh and scripts/kube-down.sh (sourced, not run):
# where everything lives and how the cluster's daemons are found and stopped.
# shellcheck shell=bash
# The paths are used by the scripts that source this file.
# shellcheck disable=SC2034

log() { printf '%s: %s\n' "${prog:-kube}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${prog:-kube}" "$*" >&2; exit 1; }

kube_version=${FORGE_KUBE_VERSION:-v1.34.4}
etcd_version=${FORGE_ETCD_VERSION:-v3.6.16}
kube_cache=${FORGE_KUBE_CACHE:-/var/cache/mcp-forge/kube}
state=${FORGE_KUBE_STATE:-/var/lib/mcp-forge/kube}
containerd_version=${FORGE_CONTAINERD_VERSION:-v2.1.5}
kube_bin=$kube_cache/$kube_version/bin
etcd_bin=$kube_cache/etcd-$etcd_version/bin
# containerd 2, its runc shim and ctr (scripts/kube/build.sh).
containerd_bin=$kube_cache/containerd-$containerd_version/bin

pki=$state/pki
run=$state/run
logs=$state/logs
kubelet_root=$state/kubelet
ctrd_root=$state/containerd/root
ctrd_state=$state/containerd/state
ctrd_sock=$run/containerd.sock
etcd_client_port=23790
etcd_peer_port=23800
# The core's own pods (deploy/, namespace mcp-forge-system) join a bridge
# with this network; sandbox pods stay with nothing but lo. The API server
# listens on the bridge's address, where the host and those pods reach it.
core_bridge=forge0
core_net=10.244.89.0/24
core_gw=10.244.89.1
core_ns=mcp-forge-system
api_url=https://$core_gw:6443
registry_addr=127.0.0.1:${FORGE_KUBE_REGISTRY_PORT:-5000}

# The daemons in start order; kube-down stops them in reverse.
daemons=(etcd kube-apiserver kube-controller-manager kube-scheduler registry containerd kubelet)

daemon_exe() {
  case $1 in
    etcd) printf '%s\n' "$etcd_bin/etcd" ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet) printf '%s\n' "$kube_bin/$1" ;;
    containerd) printf '%s\n' "$containerd_bin/containerd" ;;
    registry) printf '/usr/bin/docker-registry\n' ;;
  esac
}

# ctr_ ARGS...: containerd's CLI on this cluster's socket, in the CRI's
# namespace; the cache's ctr (containerd 2's own), or one on the PATH before
# the cache has it.
ctr_() {
  local c=$containerd_bin/ctr
  [ -x "$c" ] || c=ctr
  "$c" -a "$ctrd_sock" -n k8s.io "$@"
}

# legacy_exe NAME: the binary an older kube-up ran NAME from, if any (its
# containerd was Debian's 1.6), so that kube-down still finds and stops it
# and kube-up can tell a cluster to recreate.
legacy_exe() {
  case $1 in
    containerd) printf '/usr/bin/containerd\n' ;;
  esac
}

# is_exe_of NAME EXE: EXE is NAME's binary, or the one an older kube-up used.
is_exe_of() {
  local exe=${2% (deleted)}
  [ "$exe" = "$(daemon_exe "$1")" ] || { [ -n "$(legacy_exe "$1")" ] && [ "$exe" = "$(legacy_exe "$1")" ]; }
}

# daemon_pid NAME: the pid in NAME's pidfile when that process is alive and
# runs NAME's binary (a recycled pid of another program does not count).
daemon_pid() {
  local pidf=$run/$1.pid pid exe
  [ -f "$pidf" ] || return 1
  pid=$(cat "$pidf")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  is_exe_of "$1" "$exe" || return 1
  printf '%s\n' "$pid"
}

# stray_pids NAME: processes of NAME's binary that use this state directory
# but are not in the pidfile (a crashed script's leftovers). Matched by the
# exact binary path and this state dir in the command line, never by name.
stray_pids() {
  local exe pid
  for exe in $(daemon_exe "$1") $(legacy_exe "$1"); do
    for pid in $(pgrep -f -- "^$exe " || true); do
      if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$state/"; then printf '%s\n' "$pid"; fi
    done
  done
  return 0
}

# stop_daemon NAME: SIGTERM, up to 20 s, then SIGKILL.
stop_daemon() {
  local name=$1 pids pid
  pids=$( { daemon_pid "$name" || true; stray_pids "$name"; } | sort -u)
  [ -n "$pids" ] || return 0
  log "stopping $name (pid $(echo "$pids" | tr '\n' ' '))"
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    pids=$(for pid in $pids; do [ ! -d "/proc/$pid" ] || echo "$pid"; done)
    [ -n "$pids" ] || break
    sleep 0.2
  done
  for pid in $pids; do log "$name pid $pid ignored SIGTERM for 20 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "$run/$name.pid"
}

# api METHOD PATH [BODY] [CONTENT-TYPE]: a request to the API server as the
# scripts' admin; prints the body, returns non-zero on an HTTP error status.
# The token is read from a 0600 header file, never put on a command line
# (other users can read command lines in /proc).
api() {
  local method=$1 path=$2 body=${3:-} ctype=${4:-application/json} out code
  out=$(mktemp)
  code=$(curl -sS -o "$out" -w '%{http_code}' --cacert "$pki/ca.crt" \
    -H "@$pki/admin.header" -H "Content-Type: $ctype" \
    -X "$method" ${body:+--data-binary "$body"} "$api_url$path") || code=000
  cat "$out"; rm -f "$out"
  [ "${code:0:1}" = 2 ]
}
