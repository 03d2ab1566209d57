#!/usr/bin/env bash
# Tears down the cluster scripts/kube-up.sh brought up: pods first (so the
# kubelet stops their containers itself), then the kubelet, whatever
# containers are left (via containerd), containerd, the API server and etcd;
# then every mount under the state dir and the kubepods cgroups the kubelet
# made. --purge also removes the state dir (certificates, etcd data, imported
# images); the built binaries stay in the cache. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
prog=kube-down
# shellcheck source=scripts/kube/common.sh
. scripts/kube/common.sh

purge=0
for a in "$@"; do
  case $a in
    --purge) purge=1 ;;
    -h | --help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument $a (only --purge)" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "run as root: sudo $0 $*"
[ -d "$state" ] || { log "no state at $state: nothing to tear down"; exit 0; }

# 1. Pods: deleted through the API (so they do not come back with the next
# kube-up), while the kubelet still runs if it does, so it stops their
# containers and tears their sandboxes down the normal way.
# First the controllers, which would otherwise start the core's replicas
# again as the pods are deleted.
stop_daemon kube-controller-manager
stop_daemon kube-scheduler
if daemon_pid kube-apiserver >/dev/null && [ -f "$pki/admin.header" ]; then
  for nsp in $(api GET /api/v1/pods | jq -r '.items[].metadata.namespace' | sort -u); do
    log "deleting the pods in namespace $nsp"
    api DELETE "/api/v1/namespaces/$nsp/pods?gracePeriodSeconds=0" >/dev/null || log "deleting the pods in $nsp failed; containerd's containers are removed below"
  done
  if daemon_pid kubelet >/dev/null; then
    for _ in $(seq 1 75); do
      [ -n "$(ctr_ tasks ls -q 2>/dev/null)" ] || break
      sleep 0.2
    done
  fi
fi

# 2. The kubelet, before it can restart anything.
stop_daemon kubelet

# 3. Whatever containers are left, through containerd itself.
if daemon_pid containerd >/dev/null; then
  tasks=$(ctr_ tasks ls -q 2>/dev/null || true)
  if [ -n "$tasks" ]; then
    log "killing $(echo "$tasks" | wc -l) containers left in containerd"
    for t in $tasks; do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    for _ in $(seq 1 50); do
      [ -z "$(ctr_ tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"')" ] && break
      sleep 0.2
    done
    for t in $tasks; do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
  fi
  for c in $(ctr_ containers ls -q 2>/dev/null || true); do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
fi
stop_daemon containerd
stop_daemon registry
# A shim outlives containerd by design; once its task is gone it should
# exit. Ours are the ones whose command line names our socket: runc's and
# gVisor's, from the cache or (an older kube-up's) /usr/bin.
for pid in $(pgrep -f -- "^[^ ]*/containerd-shim-run(c-v2|sc-v1) .*-address $ctrd_sock( |$)" || true); do
  log "killing a leftover containerd shim (pid $pid)"
  kill -KILL "$pid" 2>/dev/null || true
done
# gVisor's sandboxes and gofers of a killed shim: runsc's processes whose
# root is this cluster's (runsc.toml's root).
for pid in $(pgrep -f -- "^runsc[^ ]* .*--root=$run/runsc( |$)" || true); do
  log "killing a leftover gVisor process (pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"
  kill -KILL "$pid" 2>/dev/null || true
done

# 4. The control plane.
stop_daemon kube-apiserver
stop_daemon etcd

# 5. Mounts under the state dir, deepest first (the kubelet's root-dir bind
# mount, pod volumes, container rootfs overlays, network namespaces).
for _ in 1 2 3; do
  mounts=$(findmnt -rn -o TARGET | awk -v s="$state/" 'index($0 "/", s) == 1' | sort -r)
  [ -n "$mounts" ] || break
  while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done <<<"$mounts"
done

# 6. The kubelet's cgroups (cgroup v1: one tree per controller), deepest
# first; rmdir only removes empty ones, so a live process is never affected.
shopt -s nullglob
for top in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods*; do
  find "$top" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
shopt -u nullglob

# libcni caches each attachment's result in /var/lib/cni/results (the CRI
# offers no other place); a sandbox killed above never had its CNI DEL, so
# drop our network's entries and the CRI's loopback entries of the same
# sandboxes. Nothing of another network is touched.
shopt -s nullglob
for f in /var/lib/cni/results/mcp-forge-nonet-*-eth0; do
  id=${f#/var/lib/cni/results/mcp-forge-nonet-}
  id=${id%-eth0}
  rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
done
shopt -u nullglob

# The core pods' bridge and their addresses (host-local keeps one file per pod).
svc_rule=(-s "$core_net" -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "$core_gw:6443")
while iptables -t nat -C PREROUTING "${svc_rule[@]}" 2>/dev/null; do iptables -t nat -D PREROUTING "${svc_rule[@]}" || break; done
api_rule=(-d "$core_gw/32" -p tcp --dport 6443 -j MCP-FORGE-API)
while iptables -C INPUT "${api_rule[@]}" 2>/dev/null; do iptables -D INPUT "${api_rule[@]}" || break; done
if iptables -S MCP-FORGE-API >/dev/null 2>&1; then iptables -F MCP-FORGE-API && iptables -X MCP-FORGE-API || log "could not remove the chain MCP-FORGE-API"; fi
if ip link show "$core_bridge" >/dev/null 2>&1; then ip link delete "$core_bridge" || log "could not delete the bridge $core_bridge"; fi
rm -rf "${state:?}/cni-ipam"
rm -rf "$run"
# containerd (1.6 and 2) puts every shim's socket under /run/containerd/s
# whatever its config says; remove those directories only when empty (rmdir), so a
# system containerd, if one runs, keeps its own.
rmdir /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null || true

# 7. What is left, reported (and a failure when anything is).
left=0
for d in "${daemons[@]}"; do
  p=$(stray_pids "$d")
  if [ -n "$p" ]; then log "still running: $d pid $p"; left=1; fi
done
m=$(findmnt -rn -o TARGET | awk -v s="$state/" 'index($0 "/", s) == 1 || $0 == substr(s, 1, length(s) - 1)')
if [ -n "$m" ]; then log "still mounted: $m"; left=1; fi
cg=$(ls -d /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* 2>/dev/null || true)
if [ -n "$cg" ]; then log "cgroups left: $cg"; left=1; fi
[ "$left" = 0 ] || die "the cluster is not fully down (see above)"

if [ "$purge" = 1 ]; then
  log "removing $state (binaries stay in $kube_cache)"
  rm -rf "$state"
fi
log "down: no process, mount or kubepods cgroup left"
