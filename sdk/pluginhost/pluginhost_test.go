package pluginhost_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	. "github.com/mcp-forge/mcp-forge/sdk/pluginhost"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

func buildEnvPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-env")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/envplugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// The core's environment (sockets, tokens) never reaches a plugin, and the
// connection uses per-launch mutual TLS.
func TestLaunchSkipsHostEnvAndUsesMTLS(t *testing.T) {
	bin := buildEnvPlugin(t)
	t.Setenv("FORGE_TEST_SECRET", "leaked")
	c, err := Launch(bin, hclog.NewNullLogger(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	if _, err := c.Describe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), nil); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string {
		r, err := c.Backend().Execute(context.Background(), backend.ExecuteRequest{Code: name})
		if err != nil {
			t.Fatal(err)
		}
		return r.Stdout
	}
	if v := get("FORGE_TEST_SECRET"); v != "" {
		t.Fatalf("the plugin sees the core's environment: %q", v)
	}
	if get("PLUGIN_CLIENT_CERT") == "" {
		t.Fatal("no AutoMTLS client certificate was handed to the plugin")
	}
}

// A pinned digest that does not match refuses to start the binary.
func TestLaunchPinnedMismatch(t *testing.T) {
	bin := buildEnvPlugin(t)
	_, err := Launch(bin, hclog.NewNullLogger(), Options{SHA256: strings.Repeat("ab", 32)})
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("want a checksum refusal, got %v", err)
	}
}

func TestCheckVersion(t *testing.T) {
	cases := []struct {
		d   Described
		api int
		ok  bool
	}{
		{Described{Name: "a", Version: "1.2.3", APIVersions: []int{1}}, 1, true},
		{Described{Name: "a", Version: "1.2.3-rc.1+b5", APIVersions: []int{1}}, 1, true},
		{Described{Name: "a", Version: "v1.2.3", APIVersions: []int{1}}, 1, false},
		{Described{Name: "a", Version: "1.2", APIVersions: []int{1}}, 1, false},
		{Described{Name: "a", Version: "banana", APIVersions: []int{1}}, 1, false},
		{Described{Name: "a", Version: "1.0.0", APIVersions: []int{2}}, 1, false},
	}
	for _, c := range cases {
		if err := Check(c.d, c.api); (err == nil) != c.ok {
			t.Errorf("%+v api %d: %v", c.d, c.api, err)
		}
	}
}

// The plugin refuses a Configure for an API version it does not speak.
func TestPluginChecksNegotiatedVersion(t *testing.T) {
	set := BackendPluginSet(plugin.Info{Name: "x", Version: "1.0.0"}, func(h host.Host, c backend.Config) (backend.Backend, error) { return nil, nil })
	client, _ := goplugin.TestPluginGRPCConn(t, false, set[plugin.APIVersion])
	defer client.Close()
	raw, err := client.Dispense(plugin.TypeBackend)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.(*shim.BackendClient).Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), nil, 7)
	if err == nil || !strings.Contains(err.Error(), "asked for 7") {
		t.Fatalf("want a refusal of API version 7, got %v", err)
	}
}
