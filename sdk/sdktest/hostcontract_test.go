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
	h := NewLocalHost(t.TempDir())
	RunHost(t, HostUnderTest{Host: h, UnknownKind: host.KindNotFound, WorkspaceOf: h.WorkspaceOf})
}

// The same contract holds across the plugin connection: LocalHost served
// by the shim's host services and reached through its client, as a plugin
// reaches the core's, with Dial carried either way.
func TestLocalHostContractOverWire(t *testing.T) {
	t.Parallel()
	for _, mode := range []DialMode{DialStream, DialFD} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			h := NewLocalHost(t.TempDir())
			wire := OverWire(t, h, mode)
			RunHost(t, HostUnderTest{Host: wire.Host, UnknownKind: host.KindNotFound, WorkspaceOf: h.WorkspaceOf})
		})
	}
}
