#!/usr/bin/env bash
# The gVisor leg of `make test`: the end-to-end and security tests of what
# the sandbox does, with every server's sandboxes under gVisor
# (security.isolation = "gvisor", test/testenv: FORGE_TEST_ISOLATION), on
# the local Podman. Needs runsc installed (scripts/gvisor/install.sh, which
# make setup runs). GVISOR_RUN=regexp runs only these tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export FORGE_E2E=1 FORGE_TEST_ISOLATION=gvisor
export GOFLAGS=${GOFLAGS:--tags=containers_image_openpgp,remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper}
export CGO_ENABLED=${CGO_ENABLED:-0} PATH=$PATH:/usr/local/go/bin

# Isolation itself (the kernel, the interfaces, the profile under runsc,
# pids), runs and sessions in Python and R, plots, files, the runner's and
# the kernels' channels, the tool bridge and egress through host sockets,
# warm pools, checkpoints and whole-sandbox snapshots (the runtime's and
# through MCP), and the security suite's confinement, OOM, fork
# bomb, timeouts and seccomp.
e2e='TestGVisorIsolation|TestResultSaysIsolation|TestExecutePython|TestExecuteRStateless|TestPythonSessions|TestRSessions|TestPlotComesBackAsImage|TestSessionFiles|TestToolBridgeRoundTrip|TestNetworkByHostName|TestNetworkInSession|TestCredentialAtEgress|TestWarmRunsBehaveAsCold|TestWarmSessionConfinedLikeCold|TestCheckpointRestore|TestSnapshotKeepsEverything|TestSnapshotMovesBetweenServers|TestSuspendIdleSession|TestHostRootsMounted'
security='TestSandboxConfinement|TestWarmConfinementEqualsCold|TestMemoryHogIsOOM|TestForkBombContained|TestTimeoutKills|TestSeccompRefusesEscapeCalls|TestSeccompKeepsWorkloads'

runsc=${FORGE_SECURITY_RUNSC:-/usr/local/lib/mcp-forge/runsc}
"$runsc" --version >/dev/null 2>&1 || { echo "runsc does not run at $runsc: scripts/gvisor/install.sh (make setup) installs it" >&2; exit 1; }
echo "== the end-to-end and security tests with sandboxes under gVisor ($runsc)"
if [ -n "${GVISOR_RUN:-}" ]; then
  go test -count=1 -timeout 20m -run "$GVISOR_RUN" ./test/e2e/ ./test/security/ ./core/runtime/podman/
else
  go test -count=1 -timeout 25m -run "^($e2e|$security|TestGVisorSnapshotRestore)\$" ./test/e2e/ ./test/security/ ./core/runtime/podman/
fi
