// Package sdktest runs a backend plugin in-process over real gRPC (go-plugin's
// test connection) against a host of your choosing, and holds the conformance
// suite every backend — ours or a third party's — is expected to pass.
package sdktest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

// Serve starts the backend built by factory in-process, configures it with h
// and cfg through the same gRPC shims and broker as a real plugin, and
// returns the core-side client.
func Serve(t testing.TB, info plugin.Info, factory backend.Factory, h host.Host, cfg []byte) backend.Backend {
	t.Helper()
	set := pluginhost.BackendPluginSet(info, factory)[plugin.APIVersion]
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

// Launch runs a plugin binary the way the core does (sdk/pluginhost: a
// child process over go-plugin with AutoMTLS and no host environment, the
// API version negotiated, the reported version checked) and configures it
// with h and cfg. It is the suite's real mode: a test in a module that can
// build the real core passes that core's host services for h (sdktest
// itself imports nothing of the core), so the same conformance suite runs
// the real binary against real Podman and the real policy.
func Launch(t testing.TB, path string, h host.Host, cfg []byte) backend.Backend {
	t.Helper()
	c, err := pluginhost.Launch(path, hclog.New(&hclog.LoggerOptions{Name: filepath.Base(path), Level: hclog.Warn, Output: os.Stderr}), pluginhost.Options{})
	if err != nil {
		t.Fatalf("launch %s: %v", path, err)
	}
	t.Cleanup(c.Kill)
	if _, err := c.Describe(context.Background()); err != nil {
		t.Fatalf("describe %s: %v", path, err)
	}
	if err := c.Configure(context.Background(), h, cfg); err != nil {
		t.Fatalf("configure %s: %v", path, err)
	}
	return c.Backend()
}
