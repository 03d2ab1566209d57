package sdktest

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// LocalHost passes the host-services contract the core's host services
// pass (core/hostsvc), less what it declares it lacks: it runs commands on
// the machine, so it confines nothing and knows no plugins.
func TestLocalHostContract(t *testing.T) {
	t.Parallel()
	RunHost(t, HostUnderTest{Host: NewLocalHost(t.TempDir()), UnknownKind: host.KindNotFound})
}
