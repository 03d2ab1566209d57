#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster on this host for MCP-Forge's
# Kubernetes runtime: etcd, kube-apiserver, containerd 2 (its own config,
# socket, root and state: never the system's) with runc and gVisor's runsc
# (RuntimeClass gvisor) as its runtimes, a kubelet, and the
# controller-manager and scheduler that the core's own Deployment needs
# (deploy/; the core's sandboxes carry nodeName). Offline: binaries are
# built from the Go module proxy once and cached by version, everything else
# comes from apt. Each step checks first, so running it again on an up cluster
# takes seconds. Progress goes to stderr; the last line of stdout is
# FORGE_CONFIG=<path of a forge.toml for this cluster>.
#
# Env: FORGE_KUBE_VERSION (v1.34.4), FORGE_ETCD_VERSION (v3.6.16),
# FORGE_CONTAINERD_VERSION (v2.1.5), FORGE_GVISOR_VERSION (scripts/gvisor/version),
# FORGE_KUBE_CACHE (/var/cache/mcp-forge/kube), FORGE_KUBE_STATE
# (/var/lib/mcp-forge/kube), FORGE_KUBE_SMOKE=0 skips the smoke pod,
# FORGE_KUBE_KUBECTL=0 skips building kubectl (only for humans),
# FORGE_KUBE_GVISOR=0 skips gVisor (no runsc handler, no RuntimeClass gvisor),
# FORGE_RUNSC (/usr/local/lib/mcp-forge/runsc, installed by
# scripts/gvisor/install.sh when missing),
# FORGE_KUBE_REGISTRY=0 skips the local image registry on 127.0.0.1:5000
# (FORGE_KUBE_REGISTRY_PORT); with it the sandbox images are pushed there
# too and the forge.toml names it (image_registry: custom environments are
# built there), unless FORGE_KUBE_REGISTRY_PUSH=0 (the pause image always
# is pushed: the registry's check).
# Tear down with scripts/kube-down.sh [--purge].
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
prog=kube-up
# shellcheck source=scripts/kube/common.sh
. scripts/kube/common.sh
# shellcheck source=scripts/kube/build.sh
. scripts/kube/build.sh

[ "$(id -u)" = 0 ] || die "run as root (the kubelet and containerd need it): sudo $0"
t_start=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

# ---------------------------------------------------------------- packages
need=()
# containerd itself is built (scripts/kube/build.sh): Debian's 1.6 cannot
# start gVisor's shim.
pkgs=(runc containernetworking-plugins catatonit podman openssl curl jq iptables)
[ "${FORGE_KUBE_REGISTRY:-1}" = 0 ] || pkgs+=(docker-registry)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} from apt"
  apt-get update -q >/dev/null
  # Debian's containerd and docker-registry packages enable system services;
  # this cluster runs its own of each and never uses those.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=300 "${need[@]}" >/dev/null ||
    die "apt-get install ${need[*]} failed; see the output above"
fi
for f in /usr/lib/cni/loopback /usr/bin/catatonit /usr/sbin/runc; do
  [ -x "$f" ] || die "$f is missing after installing the packages; reinstall the package that owns it"
done

# ---------------------------------------------------------------- binaries
build_all
gvisor=${FORGE_KUBE_GVISOR:-1}
runsc=${FORGE_RUNSC:-/usr/local/lib/mcp-forge/runsc}
if [ "$gvisor" != 0 ]; then
  # runsc itself, pinned (a no-op when installed: make setup installs it).
  FORGE_GVISOR_VERSION=$gvisor_version FORGE_RUNSC=$runsc scripts/gvisor/install.sh ||
    die "gVisor's runsc is not installed at $runsc (scripts/gvisor/install.sh failed above); FORGE_KUBE_GVISOR=0 brings the cluster up without gVisor"
fi

# A cluster an older kube-up left runs Debian's containerd 1.6: its pods'
# shims and state are 1.6's. It is taken down whole (its state, certificates
# and images stay) and comes up again below on containerd 2.
if pid=$(daemon_pid containerd) && [ "$(readlink "/proc/$pid/exe")" != "$(daemon_exe containerd)" ]; then
  log "this cluster runs containerd $(readlink "/proc/$pid/exe") (an older kube-up's): taking it down to bring it up on containerd $containerd_version"
  scripts/kube-down.sh || die "scripts/kube-down.sh could not take the older cluster down; see above"
fi

# ---------------------------------------------------------------- state
umask 022
mkdir -p "$pki" "$run" "$logs" "$state/etcd" "$kubelet_root/seccomp" "$ctrd_root" "$ctrd_state" \
  "$state/cni" "$state/forge" "$state/images" "$state/containerd/certs.d" "$logs/pods" "$state/registry/data"
chmod 0700 "$pki" "$state/etcd"

# ---------------------------------------------------------------- PKI
# One CA signs every serving and client certificate; only this script holds
# its key. Certificates are made once; delete pki/ (or --purge) to renew.
# openssl_q ARGS...: quiet unless it fails (key generation chatters on stderr).
openssl_q() { local e; e=$(openssl "$@" 2>&1 >/dev/null) || die "openssl $1 failed in $pki: $e"; }
[ -f "$pki/ca.crt" ] || {
  log "making the cluster CA"
  openssl_q req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key.tmp" -out "$pki/ca.crt.tmp" \
    -days 3650 -subj "/CN=mcp-forge-kube-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
  chmod 0600 "$pki/ca.key.tmp"
  mv -f "$pki/ca.key.tmp" "$pki/ca.key"
  mv -f "$pki/ca.crt.tmp" "$pki/ca.crt"
}
# cert NAME SUBJECT EXTKEYUSAGE [SAN]
cert() {
  local name=$1 subj=$2 eku=$3 san=${4:-} ext
  [ -f "$pki/$name.crt" ] && [ -f "$pki/$name.key" ] && return 0
  ext=$(mktemp)
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -z "$san" ] || echo "subjectAltName=$san"
  } >"$ext"
  openssl_q req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key.tmp" -out "$pki/$name.csr" -subj "$subj"
  openssl_q x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$pki/$name.crt.tmp"
  rm -f "$ext" "$pki/$name.csr"
  chmod 0600 "$pki/$name.key.tmp"
  mv -f "$pki/$name.key.tmp" "$pki/$name.key"
  mv -f "$pki/$name.crt.tmp" "$pki/$name.crt"
}
# The API server's certificate names the bridge address it listens on; one
# made before it did is made again.
apiserver_san="IP:$core_gw,IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes.default.svc"
if [ -f "$pki/apiserver.crt" ] && ! openssl x509 -in "$pki/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -qF "IP Address:$core_gw"; then
  log "the API server's certificate does not name $core_gw: making it again"
  rm -f "$pki/apiserver.crt" "$pki/apiserver.key"
fi
cert apiserver "/CN=kube-apiserver" serverAuth "$apiserver_san"
cert kubelet "/CN=localhost" serverAuth "DNS:localhost,IP:127.0.0.1"
cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" clientAuth
# etcd speaks TLS with client certificates even on loopback: a plain-HTTP
# etcd would let any local user read and write the whole cluster.
cert etcd-server "/CN=etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
[ -f "$pki/sa.key" ] || {
  openssl_q genrsa -out "$pki/sa.key.tmp" 2048
  chmod 0600 "$pki/sa.key.tmp"
  openssl_q rsa -in "$pki/sa.key.tmp" -pubout -out "$pki/sa.pub"
  mv -f "$pki/sa.key.tmp" "$pki/sa.key"
}

# Tokens: admin (scripts only), the kubelet, and the core's own user.
for t in admin kubelet forge; do
  [ -s "$pki/token-$t" ] || { (umask 077 && openssl rand -hex 32 >"$pki/token-$t.tmp") && mv -f "$pki/token-$t.tmp" "$pki/token-$t"; }
done
tok() { cat "$pki/token-$1"; }
(
  umask 077
  {
    printf '%s,admin,uid-admin,"system:masters"\n' "$(tok admin)"
    printf '%s,system:node:localhost,uid-kubelet,"system:nodes"\n' "$(tok kubelet)"
    printf '%s,mcp-forge-core,uid-mcp-forge-core\n' "$(tok forge)"
  } >"$pki/tokens.csv.tmp"
  printf 'Authorization: Bearer %s\n' "$(tok admin)" >"$pki/admin.header.tmp"
)
mv -f "$pki/tokens.csv.tmp" "$pki/tokens.csv"
mv -f "$pki/admin.header.tmp" "$pki/admin.header"

# kubeconfig FILE USER TOKEN: one cluster, one user, the CA embedded so the
# file works on its own.
kubeconfig() {
  local file=$1 user=$2 token=$3
  (
    umask 077
    cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: mcp-forge
  cluster:
    server: $api_url
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    token: $token
contexts:
- name: mcp-forge
  context:
    cluster: mcp-forge
    user: $user
    namespace: mcp-forge
current-context: mcp-forge
EOF
  )
  mv -f "$file.tmp" "$file"
}
kubeconfig "$state/admin.kubeconfig" admin "$(tok admin)"
kubeconfig "$state/forge.kubeconfig" mcp-forge-core "$(tok forge)"
kubeconfig "$state/kubelet.kubeconfig" system:node:localhost "$(tok kubelet)"

# ---------------------------------------------------------------- daemons
# start_daemon NAME ARGS...: in its own session (it outlives this script),
# output appended to logs/NAME.log, pid in run/NAME.pid.
# A running daemon is kept unless its signature (binary, arguments and the
# files they name) differs from the one it was started with: then it is
# restarted, so an edited config or a rebuilt binary takes effect. One found
# running without a signature is adopted as it is.
start_daemon() {
  local name=$1 exe sig a
  shift
  exe=$(daemon_exe "$name")
  sig=$(
    {
      printf '%s\n' "$exe" "$@"
      stat -c '%s %Y' "$exe"
      for a in "$@"; do if [ -f "$a" ]; then cat "$a"; fi; done
    } | sha256sum | cut -d' ' -f1
  )
  if daemon_pid "$name" >/dev/null; then
    if [ ! -f "$run/$name.sig" ]; then echo "$sig" >"$run/$name.sig"; fi
    if [ "$(cat "$run/$name.sig")" = "$sig" ]; then return 0; fi
    log "$name's binary, arguments or config changed: restarting it"
    stop_daemon "$name"
  fi
  [ -z "$(stray_pids "$name")" ] || stop_daemon "$name"
  log "starting $name"
  printf '\n==== %s start %s\n' "$(date -u +%FT%TZ)" "$name" >>"$logs/$name.log"
  # From / so that no daemon keeps a work tree (this repo) in use.
  (cd / && exec setsid "$exe" "$@") </dev/null >>"$logs/$name.log" 2>&1 &
  echo $! >"$run/$name.pid"
  echo "$sig" >"$run/$name.sig"
}
# wait_for WHAT SECONDS CMD...: until CMD succeeds, or die pointing at the log.
wait_for() {
  local what=$1 secs=$2 log_name=$3
  shift 3
  for _ in $(seq 1 $((secs * 5))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "$log_name" ] && ! daemon_pid "$log_name" >/dev/null; then
      die "$log_name exited while waiting for $what; see the end of $logs/$log_name.log"
    fi
    sleep 0.2
  done
  die "$what not ready after $secs s; see ${log_name:+$logs/$log_name.log}"
}

# The core's bridge, with its address, before the API server binds it (the
# CNI bridge plugin adopts it when the first core pod joins).
ip link show "$core_bridge" >/dev/null 2>&1 || ip link add "$core_bridge" type bridge ||
  die "could not create the bridge $core_bridge for the core's pods"
ip -4 addr show dev "$core_bridge" | grep -qF "inet $core_gw/" || ip addr add "$core_gw/${core_net#*/}" dev "$core_bridge" ||
  die "could not give $core_bridge the address $core_gw (is $core_net in use on this host?)"
ip link set "$core_bridge" up
# In-cluster clients (the core's pods) dial the kubernetes Service,
# 10.96.0.1:443. There is no kube-proxy here: one DNAT rule from the
# bridge's network stands in for it (kube-down removes it).
svc_rule=(-s "$core_net" -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination "$core_gw:6443")
iptables -t nat -C PREROUTING "${svc_rule[@]}" 2>/dev/null || iptables -t nat -A PREROUTING "${svc_rule[@]}" ||
  die "could not add the DNAT rule for the kubernetes Service (iptables -t nat -A PREROUTING ${svc_rule[*]})"
# The API server listens on the bridge's address, which Linux answers on
# any interface: only this host (lo) and the core's pods (the bridge) may
# reach it there, as they could when it listened on 127.0.0.1.
iptables -N MCP-FORGE-API 2>/dev/null || true
iptables -F MCP-FORGE-API
iptables -A MCP-FORGE-API -i lo -j RETURN
iptables -A MCP-FORGE-API -i "$core_bridge" -j RETURN
iptables -A MCP-FORGE-API -j DROP
api_rule=(-d "$core_gw/32" -p tcp --dport 6443 -j MCP-FORGE-API)
iptables -C INPUT "${api_rule[@]}" 2>/dev/null || iptables -I INPUT "${api_rule[@]}" ||
  die "could not limit who reaches the API server on $core_gw (iptables -I INPUT ${api_rule[*]})"

# etcd
start_daemon etcd --name forge --data-dir "$state/etcd" \
  --listen-client-urls "https://127.0.0.1:$etcd_client_port" --advertise-client-urls "https://127.0.0.1:$etcd_client_port" \
  --listen-peer-urls "https://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "https://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "forge=https://127.0.0.1:$etcd_peer_port" --initial-cluster-state new \
  --cert-file "$pki/etcd-server.crt" --key-file "$pki/etcd-server.key" --trusted-ca-file "$pki/ca.crt" --client-cert-auth \
  --peer-cert-file "$pki/etcd-server.crt" --peer-key-file "$pki/etcd-server.key" --peer-trusted-ca-file "$pki/ca.crt" --peer-client-cert-auth \
  --listen-metrics-urls "" --log-level warn
etcd_healthy() {
  curl -fsS --cacert "$pki/ca.crt" --cert "$pki/apiserver-etcd-client.crt" --key "$pki/apiserver-etcd-client.key" \
    "https://127.0.0.1:$etcd_client_port/health" | grep -q '"health":"true"'
}
wait_for "etcd on 127.0.0.1:$etcd_client_port" 30 etcd etcd_healthy

# kube-apiserver
start_daemon kube-apiserver \
  --bind-address "$core_gw" --secure-port 6443 --advertise-address "$core_gw" \
  --etcd-servers "https://127.0.0.1:$etcd_client_port" --etcd-cafile "$pki/ca.crt" \
  --etcd-certfile "$pki/apiserver-etcd-client.crt" --etcd-keyfile "$pki/apiserver-etcd-client.key" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --anonymous-auth=false --token-auth-file "$pki/tokens.csv" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction,PodSecurity --allow-privileged=false \
  --kubelet-preferred-address-types Hostname --kubelet-certificate-authority "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range 10.96.0.0/24 --endpoint-reconciler-type none \
  --profiling=false --v 1
wait_for "kube-apiserver /readyz" 90 kube-apiserver api GET /readyz

# kube-controller-manager: Deployments, ReplicaSets, Services' endpoints,
# PodDisruptionBudgets, owner references, volumes bound to their claims
# (and released: the protection controllers), and the root CA published to
# every namespace (what a pod's service account token volume needs). No
# node lifecycle, so nothing evicts a sandbox. It acts as admin (a test
# cluster's shortcut for per-controller service accounts).
start_daemon kube-controller-manager --kubeconfig "$state/admin.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
  --controllers deployment,replicaset,garbagecollector,endpoint,endpointslice,disruption,root-ca-cert-publisher,serviceaccount,namespace,persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller \
  --root-ca-file "$pki/ca.crt" --use-service-account-credentials=false --v 1
# kube-scheduler for pods that name no node (the core's Deployment of
# deploy/base); the core's sandboxes here carry node_name.
start_daemon kube-scheduler --kubeconfig "$state/admin.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --v 1

# ---------------------------------------------------------------- objects
# Server-side apply: creates or updates, so a second run changes nothing.
apply() {
  local path=$1 body=$2
  api PATCH "$path?fieldManager=kube-up&force=true" "$body" application/apply-patch+yaml >/dev/null ||
    die "applying $path failed: $(api PATCH "$path?fieldManager=kube-up&force=true" "$body" application/apply-patch+yaml | jq -r .message 2>/dev/null)"
}
ns=mcp-forge
apply "/api/v1/namespaces/$ns" '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"'$ns'","labels":{
  "pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest",
  "pod-security.kubernetes.io/warn":"restricted","pod-security.kubernetes.io/audit":"restricted"}}}'
# No controller-manager creates it; pods name it (and mount no token).
apply "/api/v1/namespaces/$ns/serviceaccounts/default" \
  '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default","namespace":"'$ns'"},"automountServiceAccountToken":false}'
# Pods have no network here anyway (only lo); the policy states the intent
# for clusters that do have a network and an enforcing CNI.
apply "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies/mcp-forge-deny-all" \
  '{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"mcp-forge-deny-all","namespace":"'$ns'"},
  "spec":{"podSelector":{"matchLabels":{"io.mcp-forge.managed":"true"}},"policyTypes":["Ingress","Egress"]}}'
apply "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/roles/mcp-forge-host" \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"mcp-forge-host","namespace":"'$ns'"},"rules":[
  {"apiGroups":[""],"resources":["pods"],"verbs":["create","get","list","watch","delete","deletecollection"]},
  {"apiGroups":[""],"resources":["pods/exec","pods/attach","pods/portforward"],"verbs":["create","get"]},
  {"apiGroups":[""],"resources":["pods/log"],"verbs":["get"]},
  {"apiGroups":["networking.k8s.io"],"resources":["networkpolicies"],"verbs":["get","list"]},
  {"apiGroups":[""],"resources":["events"],"verbs":["list"]}]}'
apply "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/rolebindings/mcp-forge-host" \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"mcp-forge-host","namespace":"'$ns'"},
  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"mcp-forge-host"},
  "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"mcp-forge-core"}]}'
apply "/apis/rbac.authorization.k8s.io/v1/clusterroles/mcp-forge-host-nodes" \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"mcp-forge-host-nodes"},
  "rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get"]},
  {"apiGroups":["node.k8s.io"],"resources":["runtimeclasses"],"verbs":["get"]}]}'
apply "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/mcp-forge-host-nodes" \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"mcp-forge-host-nodes"},
  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"mcp-forge-host-nodes"},
  "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"mcp-forge-core"}]}'
# The kubelet authorizes the API server's client certificate (exec, attach,
# logs, port-forward) with a SubjectAccessReview: this binding is what lets it.
apply "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/mcp-forge-apiserver-kubelet" \
  '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"mcp-forge-apiserver-kubelet"},
  "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:kubelet-api-admin"},
  "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"kube-apiserver-kubelet-client"}]}'

# gVisor's RuntimeClass, as GKE Sandbox names it: pods that name it run on
# containerd's runsc handler (below). A server asks for it with
# runtime.kubernetes.runtime_class = "gvisor".
if [ "$gvisor" != 0 ]; then
  apply /apis/node.k8s.io/v1/runtimeclasses/gvisor \
    '{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"gvisor"},"handler":"runsc"}'
else
  api DELETE /apis/node.k8s.io/v1/runtimeclasses/gvisor >/dev/null 2>&1 || true
fi

# ---------------------------------------------------------------- registry
# Debian's distribution registry on loopback, plain HTTP, with its own
# config and storage; containerd pulls from it (certs.d below). No auth:
# anyone on this host may push, as with any unauthenticated local registry.
if [ "${FORGE_KUBE_REGISTRY:-1}" != 0 ]; then
  cat >"$state/registry/config.yml.tmp" <<EOF
# written by scripts/kube-up.sh
version: 0.1
log:
  level: warn
  fields:
    service: mcp-forge-registry
storage:
  filesystem:
    rootdirectory: $state/registry/data
  delete:
    enabled: true
http:
  addr: $registry_addr
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  mv -f "$state/registry/config.yml.tmp" "$state/registry/config.yml"
  start_daemon registry serve "$state/registry/config.yml"
  wait_for "the registry on $registry_addr" 30 registry curl -fsS "http://$registry_addr/v2/"
  mkdir -p "$state/containerd/certs.d/$registry_addr"
  cat >"$state/containerd/certs.d/$registry_addr/hosts.toml.tmp" <<EOF
# written by scripts/kube-up.sh: the local registry, plain HTTP on loopback
server = "http://$registry_addr"
[host."http://$registry_addr"]
  capabilities = ["pull", "resolve"]
EOF
  mv -f "$state/containerd/certs.d/$registry_addr/hosts.toml.tmp" "$state/containerd/certs.d/$registry_addr/hosts.toml"
else
  stop_daemon registry
  rm -rf "${state:?}/containerd/certs.d/$registry_addr"
fi

# ---------------------------------------------------------------- containerd
pause_image=localhost/mcp-forge/pause:catatonit
# Pods get a network namespace of their own with nothing but lo. The CRI
# insists on an address for eth0 in the CNI result ("failed to find network
# info for sandbox") and the loopback plugin reports only lo; loopback passes
# a prevResult through untouched, and libcni leaves the first plugin's
# prevResult as written. So this one loopback plugin brings lo up and
# hands the CRI a stub eth0 result with 127.0.0.1: no interface is created.
#
# The core's own pods (namespace $core_ns) are the exception: they need the
# API server and a port a client reaches. scripts/kube/cni-net decides by
# the pod's namespace and hands the config to the bridge plugin for those,
# to loopback for every other pod. Its directory holds it and links to
# Debian's plugins.
mkdir -p "$state/cni-bin" "$state/cni-ipam"
install -m 0755 scripts/kube/cni-net "$state/cni-bin/mcp-forge-net"
for p in /usr/lib/cni/*; do ln -sfn "$p" "$state/cni-bin/$(basename "$p")"; done
cat >"$state/cni/10-mcp-forge-nonet.conflist.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "mcp-forge-nonet",
  "plugins": [
    {
      "type": "mcp-forge-net",
      "coreNamespace": "$core_ns",
      "core": {
        "type": "bridge", "bridge": "$core_bridge", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
        "ipam": {"type": "host-local", "dataDir": "$state/cni-ipam", "ranges": [[{"subnet": "$core_net", "gateway": "$core_gw"}]]}
      },
      "sandbox": {
        "type": "loopback",
        "prevResult": {
          "cniVersion": "1.0.0",
          "interfaces": [{"name": "eth0"}],
          "ips": [{"interface": 0, "address": "127.0.0.1/8"}]
        }
      }
    }
  ]
}
EOF
mv -f "$state/cni/10-mcp-forge-nonet.conflist.tmp" "$state/cni/10-mcp-forge-nonet.conflist"

# gVisor: containerd starts gVisor's shim (built by scripts/kube/build.sh,
# patched to live with the oom_score_adj it may not lower) for the handler
# runsc, and the shim runs runsc with this file's flags. systrap needs no
# /dev/kvm (none here). oci-seccomp applies the pod's seccomp profile in the
# Sentry, which runsc otherwise ignores without a word (the kubelet's
# Localhost profile would be claimed and not enforced); runsc answers its
# refusals with EPERM whatever the profile says, hence the gVisor variant of
# MCP-Forge's profile (mcp-forge-gvisor.json, below). host-uds: a pod's
# containers each reach its emptyDir through their own gofer mount, so a
# unix socket the runner or a kernel binds in the sandbox container lives
# only in that mount unless it is made on the host (create), where the
# keeper's relay connects to it (open); without it no runner is ever
# reached (the socket is not there for the keeper), and every run waits out
# its ready timeout. The host sockets are in the pod's own emptyDir.
# runsc's own state goes under our run dir, never /run/containerd/runsc.
runsc_handler=''
if [ "$gvisor" != 0 ]; then
  cat >"$state/containerd/runsc.toml.tmp" <<EOF
# written by scripts/kube-up.sh: gVisor's shim options for the handler runsc
binary_name = "$runsc"
root = "$run/runsc"
[runsc_config]
  platform = "systrap"
  oci-seccomp = "true"
  host-uds = "all"
EOF
  mv -f "$state/containerd/runsc.toml.tmp" "$state/containerd/runsc.toml"
  runsc_handler="
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = 'io.containerd.runsc.v1'
        runtime_path = '$runsc_shim'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          TypeUrl = 'io.containerd.runsc.v1.options'
          ConfigPath = '$state/containerd/runsc.toml'"
else
  rm -f "$state/containerd/runsc.toml"
fi

# containerd 2's own config layout (version 3): the CRI's images, runtime and
# streaming server are separate plugins.
cat >"$state/containerd/config.toml.tmp" <<EOF
# written by scripts/kube-up.sh: the cluster's own containerd $containerd_version (not the system's)
version = 3
root = '$ctrd_root'
state = '$ctrd_state'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.aufs', 'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs']

[grpc]
  address = '$ctrd_sock'
[ttrpc]
  address = '$ctrd_sock.ttrpc'
[debug]
  address = ''
[metrics]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '$state/containerd/opt'
  # NRI would listen on /var/run/nri/nri.sock, the system's.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$pause_image'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '$state/containerd/certs.d'
  [plugins.'io.containerd.cri.v1.runtime']
    # This VM refuses lowering oom_score_adj: without this every sandbox fails.
    restrict_oom_score_adj = true
    # Network namespaces under our state dir, not /run/netns.
    netns_mounts_under_state_dir = true
    enable_selinux = false
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        runtime_path = '$containerd_bin/containerd-shim-runc-v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '/usr/sbin/runc'
          # runc's own state, else /run/containerd/runc (the system's tree).
          Root = '$run/runc'
          SystemdCgroup = false$runsc_handler
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$state/cni-bin']
      conf_dir = '$state/cni'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
EOF
mv -f "$state/containerd/config.toml.tmp" "$state/containerd/config.toml"
start_daemon containerd --config "$state/containerd/config.toml" "$state/containerd/runsc.toml" "$runsc_shim" "$runsc"
# ctr_has_image NAME (the list is read whole first: grep -q on a pipe would
# close it early and, with pipefail, fail on ctr's SIGPIPE).
ctr_has_image() { local l; l=$(ctr_ images ls -q) && grep -qxF "$1" <<<"$l"; }
wait_for "containerd on $ctrd_sock" 30 containerd ctr_ version
# The CRI serves the kubelet only once it has recovered its state, which
# `ctr version` does not wait for: 15 s after a CI run's pods, and a
# kubelet started before exits ("server is not initialized yet").
cri_ready() { awk '/^==== .* start containerd$/ { ok = 0 } /msg="Start event monitor"/ { ok = 1 } END { exit !ok }' "$logs/containerd.log"; }
wait_for "containerd's CRI to recover its state" 120 containerd cri_ready

# import_image NAME: podman image -> containerd, skipped when the stamp holds
# the podman image ID and containerd still lists the name.
import_image() {
  local name=$1 id t0
  id=$(podman image inspect --format '{{.Id}}' "$name" 2>/dev/null) ||
    die "podman has no image $name; build it first (make images)"
  if [ "$(cat "$state/images/${name//\//_}.id" 2>/dev/null)" = "$id" ] && ctr_has_image "$name"; then
    return 0
  fi
  log "importing $name (podman ${id:0:12}) into containerd ..."
  t0=$(date +%s.%N)
  podman save "$name" | ctr_ images import - >/dev/null ||
    die "importing $name into containerd failed"
  ctr_has_image "$name" || die "containerd does not list $name after the import; it lists: $(ctr_ images ls -q | tr '\n' ' ')"
  echo "$id" >"$state/images/${name//\//_}.id"
  log "imported $name in $(elapsed "$t0") s"
}

# The pause image: FROM scratch with Debian's static catatonit in pause mode.
cat_ver=$(dpkg-query -W -f='${Version}' catatonit)
if ! podman image exists "$pause_image" || [ "$(podman image inspect --format '{{index .Labels "io.mcp-forge.catatonit"}}' "$pause_image")" != "$cat_ver" ]; then
  log "building $pause_image (catatonit $cat_ver)"
  ctx=$(mktemp -d)
  cp /usr/bin/catatonit "$ctx/catatonit"
  printf 'FROM scratch\nLABEL io.mcp-forge.catatonit=%s\nCOPY catatonit /catatonit\nUSER 65535:65535\nENTRYPOINT ["/catatonit", "-P"]\n' "$cat_ver" >"$ctx/Containerfile"
  podman build -q -t "$pause_image" "$ctx" >/dev/null || { rm -rf "$ctx"; die "podman build of $pause_image failed"; }
  rm -rf "$ctx"
fi
import_image "$pause_image"
import_image localhost/mcp-forge/python:3.11
import_image localhost/mcp-forge/r:4.2
# mcp-forge-agent's image (images/agent), which every sandbox pod copies the
# agent from: built from bin/ when make build made the agent, else from
# the source into a temporary directory.
agent_bin=bin
if [ ! -x bin/mcp-forge-agent ]; then
  agent_bin=$(mktemp -d)
  env GOWORK= PATH="$PATH:/usr/local/go/bin" CGO_ENABLED=0 go build -o "$agent_bin/mcp-forge-agent" ./cmd/mcp-forge-agent ||
    die "could not build mcp-forge-agent (go build ./cmd/mcp-forge-agent in $repo)"
fi
agent_image=$(images/agent/build.sh "$agent_bin" | tail -n 1) || die "images/agent/build.sh failed"
[ "$agent_bin" = bin ] || rm -rf "$agent_bin"
import_image "$agent_image"
import_image localhost/mcp-forge/agent:dev
# push_image NAME [PULL]: podman image -> the local registry as
# $registry_addr/<path>, skipped when the stamp holds the podman image ID and
# the registry has the tag. With PULL, containerd also pulls it from there by
# tag and by digest: the core runs a registry image by its digest, and a
# node that holds it under that name starts pods without a pull
# (IfNotPresent), as under pull_policy Never.
push_image() {
  local name=$1 pull=${2:-} id t0 path tag stamp digest ref
  path=${name#localhost/}
  tag=${path##*:}
  path=${path%:*}
  stamp=$state/images/registry_${name//\//_}.id
  id=$(podman image inspect --format '{{.Id}}' "$name")
  digest=$(sed -n 2p "$stamp" 2>/dev/null || true)
  if [ "$(head -n 1 "$stamp" 2>/dev/null)" != "$id" ] || [ -z "$digest" ] ||
    ! curl -fsS "http://$registry_addr/v2/$path/tags/list" | jq -e --arg t "$tag" '.tags | index($t)' >/dev/null 2>&1; then
    log "pushing $name to $registry_addr/$path:$tag ..."
    t0=$(date +%s.%N)
    rm -f "$stamp" "$run/push.digest"
    podman push -q --tls-verify=false --digestfile "$run/push.digest" "$name" "docker://$registry_addr/$path:$tag" >/dev/null ||
      die "podman push of $name to $registry_addr failed; see $logs/registry.log"
    digest=$(cat "$run/push.digest")
    printf '%s\n%s\n' "$id" "$digest" >"$stamp"
    log "pushed $name in $(elapsed "$t0") s ($digest)"
  fi
  [ -n "$pull" ] || return 0
  if ! ctr_has_image "$registry_addr/$path@$digest" || ! ctr_has_image "$registry_addr/$path:$tag"; then
    t0=$(date +%s.%N)
    for ref in "$registry_addr/$path:$tag" "$registry_addr/$path@$digest"; do
      ctr_ images pull --plain-http "$ref" >/dev/null || die "containerd could not pull $ref from the local registry; see $logs/registry.log"
    done
    log "containerd pulled $registry_addr/$path:$tag (@$digest) in $(elapsed "$t0") s"
  fi
}
if [ "${FORGE_KUBE_REGISTRY:-1}" != 0 ]; then
  push_image "$pause_image"
  if [ "${FORGE_KUBE_REGISTRY_PUSH:-1}" != 0 ]; then
    push_image localhost/mcp-forge/python:3.11 pull
    push_image localhost/mcp-forge/r:4.2 pull
    image_registry=$registry_addr
  fi
fi
log "containerd (namespace k8s.io) lists: $(ctr_ images ls -q | grep -v -e '^sha256:' -e '@sha256:' | tr '\n' ' ')"

# ---------------------------------------------------------------- kubelet
# MCP-Forge's seccomp profile as the Localhost profile mcp-forge.json, and
# its variant for pods under gVisor as mcp-forge-gvisor.json (a server with
# runtime_class = "gvisor" names that one: see runsc.toml above).
# install_seccomp FILE [VARIANT]
install_seccomp() {
  local file=$1 variant=${2:-} json
  json=$(mktemp)
  # shellcheck disable=SC2086 # the variant is one word or none
  if [ -x bin/mcp-forge ] && bin/mcp-forge seccomp-profile $variant >"$json" 2>/dev/null && [ -s "$json" ]; then :; else
    # shellcheck disable=SC2086
    env GOWORK= PATH="$PATH:/usr/local/go/bin" \
      GOFLAGS=-tags=containers_image_openpgp,remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper \
      CGO_ENABLED=0 go run ./scripts/kube/seccompjson $variant >"$json" ||
      { rm -f "$json"; die "could not produce MCP-Forge's seccomp profile ${variant:+($variant) }(go run ./scripts/kube/seccompjson in $repo)"; }
  fi
  jq -e .defaultAction "$json" >/dev/null || { rm -f "$json"; die "the seccomp profile ${variant:+($variant) }is not JSON with a defaultAction"; }
  chmod 0644 "$json"
  mv -f "$json" "$kubelet_root/seccomp/$file"
}
install_seccomp mcp-forge.json
if [ "$gvisor" != 0 ]; then install_seccomp mcp-forge-gvisor.json gvisor; fi

cat >"$state/kubelet-config.yaml.tmp" <<EOF
# written by scripts/kube-up.sh
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
# This host has cgroups v1; from 1.35 the kubelet refuses it unless told.
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$ctrd_sock
podPidsLimit: 1024
seccompDefault: false
podLogsDir: $logs/pods
volumePluginDir: $kubelet_root/volume-plugins
resolvConf: ""
serializeImagePulls: false
# A test cluster on a shared development disk: the kubelet's defaults
# (evict below 15% free for images, 10% for the node) refused every pod on
# a 252 GB disk with 37 GB free (DiskPressure). Evict only when little is
# left in bytes. No image garbage collection: its threshold is a share of
# the disk (85% by default), which other work on the same disk crosses,
# and it then removes every image no pod runs: the agent's and the core's,
# imported with pull policy Never, which no pod can start without (seen:
# ErrImageNeverPull for the agent image mid-run). 100 turns it off.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  imagefs.available: "2Gi"
  nodefs.available: "2Gi"
  nodefs.inodesFree: "5%"
  memory.available: "100Mi"
EOF
mv -f "$state/kubelet-config.yaml.tmp" "$state/kubelet-config.yaml"
start_daemon kubelet --config "$state/kubelet-config.yaml" --kubeconfig "$state/kubelet.kubeconfig" \
  --root-dir "$kubelet_root" --cert-dir "$kubelet_root/pki" --hostname-override localhost --v 1
node_ready() {
  api GET /api/v1/nodes/localhost | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null
}
wait_for "node localhost Ready" 90 kubelet node_ready
# The kubelet registers the node tainted not-ready; the node lifecycle
# controller, which would lift the taint, is not run here (it would also
# evict pods when a heartbeat is late). Pods the scheduler places need it gone.
node_json=$(api GET /api/v1/nodes/localhost)
if jq -e '.spec.taints // [] | any(.key == "node.kubernetes.io/not-ready")' <<<"$node_json" >/dev/null; then
  api PATCH /api/v1/nodes/localhost "$(jq -c '{spec: {taints: ([.spec.taints[] | select(.key != "node.kubernetes.io/not-ready")])}}' <<<"$node_json")" \
    application/merge-patch+json >/dev/null || die "could not lift the not-ready taint of node localhost"
fi

# ---------------------------------------------------------------- forge.toml
cat >"$state/forge.toml.tmp" <<EOF
# written by scripts/kube-up.sh: every sandbox on the local single-node cluster
[runtime]
kind = "kubernetes"
[runtime.kubernetes]
kubeconfig = "$state/forge.kubeconfig"
namespace = "$ns"
node_name = "localhost"          # the one node: sandboxes skip the scheduler
pull_policy = "Never"            # images imported into containerd
agent_image = "$agent_image"  # mcp-forge-agent, copied into every pod (images/agent)
image_registry = "${image_registry:-}"  # custom environments are pushed there; empty: none can be built
seccomp_profile = "mcp-forge.json"
workspace_medium = "Memory"      # a tmpfs workspace: a write past the quota fails with ENOSPC
node_pids_limit = 1024           # the kubelet's podPidsLimit (kubelet-config.yaml)
[volumes]
base_path = "$state/forge"      # the core's own state for this cluster
[security]
audit_log = "$state/forge/audit.log"
# What this cluster cannot give: user namespaces for pods (hostUsers: false;
# not set up here), and Kubernetes no open-files limit per pod. gVisor:
# RuntimeClass gvisor (runtime_class = "gvisor", with seccomp_profile =
# "mcp-forge-gvisor.json"); the default runtime here is runc.
waive = ["user-namespace", "open-files"]
EOF
mv -f "$state/forge.toml.tmp" "$state/forge.toml"
cat >"$state/env.tmp" <<EOF
# written by scripts/kube-up.sh: . $state/env
KUBECONFIG=$state/admin.kubeconfig
FORGE_KUBECONFIG=$state/forge.kubeconfig
CONTAINERD_ADDRESS=$ctrd_sock
CONTAINERD_NAMESPACE=k8s.io
PATH=$kube_bin:$containerd_bin:\$PATH
export KUBECONFIG FORGE_KUBECONFIG CONTAINERD_ADDRESS CONTAINERD_NAMESPACE PATH
EOF
mv -f "$state/env.tmp" "$state/env"

# ---------------------------------------------------------------- smoke test
# As the core's own user (so its RBAC is exercised), a pod as hardened as the
# core's: PodSecurity "restricted" admits it, the kubelet runs it under the
# mcp-forge.json seccomp profile, and it must see only lo. It does not carry
# io.mcp-forge.managed: a core looking for its own (or a dead core's) pods
# by that label must never find these.
if [ "${FORGE_KUBE_SMOKE:-1}" != 0 ]; then
  fapi() {
    local method=$1 path=$2 body=${3:-} out code
    out=$(mktemp)
    code=$(curl -sS -o "$out" -w '%{http_code}' --cacert "$pki/ca.crt" -H "@$state/run/forge.header" \
      -H 'Content-Type: application/json' -X "$method" ${body:+--data-binary "$body"} "$api_url$path") || code=000
    cat "$out"; rm -f "$out"
    [ "${code:0:1}" = 2 ]
  }
  (umask 077 && printf 'Authorization: Bearer %s\n' "$(tok forge)" >"$state/run/forge.header")
  # smoke_pod NAME IMAGE PULL_POLICY COMMAND_JSON_OR_EMPTY UNTIL [CHECK]:
  # creates the pod, waits for phase UNTIL (Succeeded or Running), runs
  # CHECK POD if given, leaves its log in $smoke_log and the time in
  # $smoke_secs, deletes it. $smoke_class names a RuntimeClass for it, and
  # $smoke_profile its Localhost seccomp profile (mcp-forge.json).
  smoke_class='' smoke_profile=mcp-forge.json
  smoke_pod() {
    local pod=$1 image=$2 pull=$3 cmd=$4 until=$5 check=${6:-} t0 phase='' check_err=''
    fapi DELETE "/api/v1/namespaces/$ns/pods/$pod?gracePeriodSeconds=0" >/dev/null || true
    for _ in $(seq 1 50); do fapi GET "/api/v1/namespaces/$ns/pods/$pod" >/dev/null || break; sleep 0.2; done
    t0=$(date +%s.%N)
    fapi POST "/api/v1/namespaces/$ns/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$pod"'","labels":{"app.kubernetes.io/name":"kube-up-smoke"}},
    "spec":{"nodeName":"localhost","restartPolicy":"Never","automountServiceAccountToken":false,"enableServiceLinks":false,'"${smoke_class:+\"runtimeClassName\":\"$smoke_class\",}"'
    "securityContext":{"runAsUser":1000,"runAsGroup":1000,"runAsNonRoot":true,"seccompProfile":{"type":"Localhost","localhostProfile":"'"$smoke_profile"'"}},
    "containers":[{"name":"main","image":"'"$image"'","imagePullPolicy":"'"$pull"'"'"${cmd:+,\"command\":$cmd}"',
      "resources":{"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"cpu":"500m","memory":"256Mi"}},
      "securityContext":{"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}' >"$run/smoke.json" ||
      die "the forge user could not create the smoke pod $pod: $(jq -r .message "$run/smoke.json")"
    for _ in $(seq 1 300); do
      phase=$(fapi GET "/api/v1/namespaces/$ns/pods/$pod" | jq -r .status.phase)
      case $phase in "$until" | Failed | Succeeded) break ;; esac
      sleep 0.1
    done
    smoke_secs=$(elapsed "$t0")
    smoke_log=$(fapi GET "/api/v1/namespaces/$ns/pods/$pod/log") || smoke_log="(log not readable: $smoke_log)"
    # Why a pod failed before it ran (evicted by the kubelet: DiskPressure, say).
    local why
    why=$(fapi GET "/api/v1/namespaces/$ns/pods/$pod" | jq -r '[.status.reason, .status.message] | map(select(. != null and . != "")) | join(": ")' 2>/dev/null) || why=''
    [ -z "$why" ] || smoke_log="$smoke_log (pod status: $why)"
    if [ "$phase" = "$until" ] && [ -n "$check" ]; then check_err=$("$check" "$pod" 2>&1) || check_err="failed: ${check_err:-no output}"; fi
    fapi DELETE "/api/v1/namespaces/$ns/pods/$pod?gracePeriodSeconds=0" >/dev/null || true
    [ "$phase" = "$until" ] ||
      die "smoke pod $pod is $phase after $smoke_secs s, not $until: $smoke_log; see $logs/kubelet.log and $logs/containerd.log"
    case $check_err in failed:*) die "smoke pod $pod: $check ${check_err}" ;; esac
    smoke_check=$check_err
  }
  # exec_check POD: an exec through the API server and the kubelet as the
  # core's user (the core's data plane), timed; needs the kubectl built above.
  exec_check() {
    local t0 out
    t0=$(date +%s.%N)
    out=$("$kube_bin/kubectl" --kubeconfig "$state/forge.kubeconfig" -n "$ns" exec "$1" -- /catatonit --version 2>&1) ||
      { printf '%s\n' "$out"; return 1; }
    case $out in *catatonit*) ;; *) printf 'unexpected output %s\n' "$out"; return 1 ;; esac
    printf 'exec "%s" in %s s' "$out" "$(elapsed "$t0")"
  }
  # It prints its network interfaces, its seccomp mode and what
  # io_uring_setup(2) returns: MCP-Forge's profile answers ENOSYS (38), where
  # containerd's default profile or none would let the call through (EFAULT
  # for the null argument), so only our profile gives "38".
  py="import socket, ctypes, re
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(425, 1, None)
mode = re.search(r'Seccomp:\s*(\d+)', open('/proc/self/status').read()).group(1)
print(1, sorted(n for _, n in socket.if_nameindex()), 'seccomp=' + mode, 'io_uring_setup=%d' % (ctypes.get_errno() if r < 0 else 0))"
  want="1 ['lo'] seccomp=2 io_uring_setup=38"
  smoke_pod kube-up-smoke localhost/mcp-forge/python:3.11 Never "$(jq -cn --arg c "$py" '["python3", "-c", $c]')" Succeeded
  [ "$smoke_log" = "$want" ] ||
    die "smoke pod printed '$smoke_log', wanted \"$want\" (a network namespace with only lo, under MCP-Forge's seccomp profile)"
  log "smoke pod: created -> Succeeded in $smoke_secs s, log \"$smoke_log\" (only lo; MCP-Forge's seccomp profile)"
  # The same pod under gVisor (RuntimeClass gvisor, the profile's gVisor
  # variant): gVisor's kernel, only lo, the profile applied in the Sentry
  # (runsc answers its refusals with EPERM, 1), and a thread (which the
  # runc profile's clone3 refusal would stop there).
  if [ "$gvisor" != 0 ]; then
    gpy="import socket, ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(425, 1, None)
t = threading.Thread(target=lambda: None); t.start(); t.join()
print('gvisor' in open('/proc/version').read(), sorted(n for _, n in socket.if_nameindex()), 'io_uring_setup=%d' % (ctypes.get_errno() if r < 0 else 0))"
    gwant="True ['lo'] io_uring_setup=1"
    smoke_class=gvisor smoke_profile=mcp-forge-gvisor.json
    smoke_pod kube-up-smoke-gvisor localhost/mcp-forge/python:3.11 Never "$(jq -cn --arg c "$gpy" '["python3", "-c", $c]')" Succeeded
    smoke_class='' smoke_profile=mcp-forge.json
    [ "$smoke_log" = "$gwant" ] ||
      die "gVisor smoke pod printed '$smoke_log', wanted \"$gwant\" (gVisor's kernel, only lo, MCP-Forge's profile applied in the Sentry); see $logs/containerd.log"
    log "gVisor smoke pod (RuntimeClass gvisor): created -> Succeeded in $smoke_secs s, log \"$smoke_log\""
  fi
  # A long-running pod for exec: the pause image (catatonit -P), pulled from
  # the registry when there is one (which checks the registry too).
  check=
  if runs_version "$kube_bin/kubectl"; then check=exec_check; fi
  if [ "${FORGE_KUBE_REGISTRY:-1}" != 0 ]; then
    smoke_pod kube-up-smoke-exec "$registry_addr/mcp-forge/pause:catatonit" Always "" Running $check
    log "smoke pod from the registry ($registry_addr/mcp-forge/pause:catatonit, pull Always): created -> Running in $smoke_secs s${smoke_check:+; $smoke_check}"
  elif [ -n "$check" ]; then
    smoke_pod kube-up-smoke-exec "$pause_image" Never "" Running $check
    log "smoke pod $pause_image: created -> Running in $smoke_secs s; $smoke_check"
  fi
fi

log "cluster up in $(elapsed "$t_start") s; KUBECONFIG=$state/admin.kubeconfig (. $state/env)"
printf 'FORGE_CONFIG=%s\n' "$state/forge.toml"
