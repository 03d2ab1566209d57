#!/usr/bin/env bash
# The Kubernetes leg of `make test`: brings up the single-node cluster of
# scripts/kube-up.sh (binaries cached by version outside the repository),
# runs the same end-to-end tests with their servers' sandboxes as pods on
# it (test/testenv: FORGE_TEST_KUBE_CONFIG), then tears the cluster down.
#   FORGE_KUBE_KEEP=1   leave the cluster up afterwards
#   KUBE_RUN=regexp     only these tests (default: the matrix below)
#   KUBE_BENCH=regexp   only these benchmarks of test/cluster (KUBE_BENCHTIME, 20x)
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1
# As the Makefile sets them (make test and make test-kube run this), for a
# direct run too: the Podman bindings build without cgo libraries.
export GOFLAGS=${GOFLAGS:--tags=containers_image_openpgp,remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper}
export CGO_ENABLED=${CGO_ENABLED:-0} PATH=$PATH:/usr/local/go/bin

# The tests of what the runtime does, on both runtimes: pods and their
# images, runs and sessions in Python and R, files in and out of a pod, the
# in-pod agent's relays (kernels, the runner, the tool bridge, egress),
# checkpoints to and from a pod, restarts and reaping, warm pods. Tests of
# the engine's own logic (ownership, quotas of calls, audit contents,
# notebooks, forks) run on Podman only: they do not ask the runtime
# anything Podman's run does not (CI's time is one budget for both). Those
# not here test what only Podman has (its CLI, loop-device workspaces, the
# watchdog of host processes), or what the Kubernetes runtime refuses with
# a reason. Custom environments run on it with kube-up's registry. gVisor
# pods (kube-up's RuntimeClass gvisor) are TestKubeGVisor*'s: the matrix
# itself runs on the default runtime, runc.
e2e='TestKubeSandboxPods|TestKubeImageWithoutPerl|TestExecutePython|TestExecuteRStateless|TestPythonSessions|TestRSessions|TestPlotComesBackAsImage|TestStatelessInputFiles|TestExecTimeoutNeedsNothingInTheImage|TestSIGKILLIsNotOOM|TestHostExec|TestHostSignalAll|TestHostFiles|TestWarmRunsBehaveAsCold|TestSessionFiles|TestSessionFilesOwnership|TestSessionFilesQuota|TestSessionFilesHostilePaths|TestKubePodDeadlines|TestCheckpointRestore|TestCheckpointQuota|TestSessionsSurviveServerRestart|TestNoOrphansAfterRestart|TestIdleReaper|TestWarmSessionNeverShared|TestWarmSessionConfinedLikeCold|TestKernelDeathRaisesNoFalseAlarm|TestToolBridgeRoundTrip|TestNetworkByHostName|TestNetworkInSession|TestCredentialAtEgress|TestResultSaysIsolation|TestKubeGVisorPods|TestKubeGVisorNeedsRuntimeClass|TestTracesThroughThePlugin|TestKubeHostRootClaim'
security='TestSandboxConfinement|TestMemoryHogIsOOM|TestForkBombContained|TestTimeoutKills|TestSIGKILLIsNotOOM|TestSeccompRefusesEscapeCalls|TestSeccompKeepsWorkloads'
http='TestHTTPSameChecksAsStdio|TestHTTPTenantIsolation|TestHTTPQuotas'
environments='TestEnvironmentLifecycle|TestEnvironmentsBelongToTenants|TestUVBuilderEndToEnd'

up=$(scripts/kube-up.sh | tail -n 1)
case "$up" in
  FORGE_CONFIG=*) cfg=${up#FORGE_CONFIG=} ;;
  *) echo "kube-up did not end with FORGE_CONFIG=...: $up" >&2; exit 1 ;;
esac
if [ "${FORGE_KUBE_KEEP:-0}" != 1 ]; then
  trap 'scripts/kube-down.sh >&2 || true' EXIT
fi
# The core itself in the cluster (test/cluster): its image from bin/,
# imported into the node's containerd as kube-up imports the sandbox images.
. scripts/kube/common.sh
# The tests' own ctr calls use containerd 2's (the cluster's) ctr.
export PATH=$containerd_bin:$PATH
core_image=$(images/core/build.sh | tail -n 1)
if ! ctr_ images ls -q | grep -qxF "$core_image"; then
  podman save "$core_image" | ctr_ images import - >/dev/null ||
    { echo "importing $core_image into the cluster's containerd failed" >&2; exit 1; }
fi
export FORGE_TEST_CORE_IMAGE=$core_image FORGE_TEST_KUBECTL=$kube_bin/kubectl FORGE_TEST_KUBE_ADMIN=$state/admin.kubeconfig FORGE_TEST_CONTAINERD=$ctrd_sock

echo "== the same end-to-end tests with sandboxes as pods ($cfg)"
bin/mcp-forge doctor --config "$cfg" >/dev/null || bin/mcp-forge doctor --config "$cfg" | grep -v '^ok' || true
if [ -n "${KUBE_BENCH:-}" ]; then
  FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 15m -run '^$' -bench "$KUBE_BENCH" -benchtime "${KUBE_BENCHTIME:-20x}" ./test/cluster/
elif [ -n "${KUBE_RUN:-}" ]; then
  FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 30m -run "$KUBE_RUN" ./test/e2e/ ./test/security/ ./test/http/ ./test/environments/ ./test/cluster/
else
  # Two lanes: test/e2e beside the security, HTTP, environments and
  # in-cluster core tests (each server finds its own pods by its instance
  # label, the in-cluster cores' by their core-pod annotation; all mostly
  # wait on pods).
  e2e_log=$(mktemp)
  FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 40m -run "^($e2e)\$" ./test/e2e/ >"$e2e_log" 2>&1 &
  e2e_pid=$!
  rc=0
  {
    FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 10m -run "^($security)\$" ./test/security/ &&
      FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 10m -run "^($http)\$" ./test/http/ &&
      FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 20m -run "^($environments)\$" ./test/environments/ &&
      echo "== the core in the cluster: deploy/ applied with kubectl ($core_image)" &&
      FORGE_TEST_KUBE_CONFIG=$cfg go test -count=1 -timeout 15m ./test/cluster/
  } || rc=$?
  wait "$e2e_pid" || rc=1
  cat "$e2e_log"
  rm -f "$e2e_log"
  exit $rc
fi
