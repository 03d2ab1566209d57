package sdktest

import (
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
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
// reaches the core's (Dial's byte stream included).
func TestLocalHostContractOverWire(t *testing.T) {
	t.Parallel()
	h := NewLocalHost(t.TempDir())
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "host.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(shim.ServerOptions(shim.DefaultMaxMessage)...)
	shim.RegisterHost(s, h)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+l.Addr().String(), append(shim.DialOptions(shim.DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	RunHost(t, HostUnderTest{Host: shim.NewHostClient(conn), UnknownKind: host.KindNotFound, WorkspaceOf: h.WorkspaceOf})
}
