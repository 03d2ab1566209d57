// Package sdktest runs a backend plugin in-process over real gRPC (go-plugin's
// test connection) against a host of your choosing, and holds the conformance
// suite every backend — ours or a third party's — is expected to pass.
package sdktest

import (
	"context"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Serve starts the backend built by factory in-process, configures it with h
// and cfg through the same gRPC shims and broker as a real plugin, and
// returns the core-side client.
func Serve(t testing.TB, info plugin.Info, factory backend.Factory, h host.Host, cfg []byte) backend.Backend {
	t.Helper()
	set := plugin.BackendPluginSet(info, factory)[plugin.APIVersion]
	client, _ := goplugin.TestPluginGRPCConn(t, false, set)
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(plugin.TypeBackend)
	if err != nil {
		t.Fatalf("dispense: %v", err)
	}
	bc := raw.(*shim.BackendClient)
	got, err := bc.Info(context.Background())
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if got.Name != info.Name || got.Version != info.Version || got.Type != plugin.TypeBackend {
		t.Fatalf("info round trip: got %+v, want %+v", got, info)
	}
	if err := bc.Configure(context.Background(), h, cfg, plugin.APIVersion); err != nil {
		t.Fatalf("configure: %v", err)
	}
	return bc
}
