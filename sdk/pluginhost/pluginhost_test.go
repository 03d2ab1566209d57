package pluginhost_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
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
	raw, err := client.Dispense(string(plugin.TypeBackend))
	if err != nil {
		t.Fatal(err)
	}
	err = raw.(*shim.BackendClient).Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), nil, nil, 7)
	if err == nil || !strings.Contains(err.Error(), "asked for 7") {
		t.Fatalf("want a refusal of API version 7, got %v", err)
	}
}

func buildTestPlugin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-"+name)
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/"+name).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// A builder binary launches the way a backend does (same handshake, mTLS,
// lifeline), reports its type, and streams a build through the shims.
func TestLaunchBuilderPlugin(t *testing.T) {
	c, err := Launch(buildTestPlugin(t, "builderplugin"), hclog.NewNullLogger(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	d, err := c.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != plugin.TypeBuilder || d.Name != "testbuilder" || d.Version != "0.2.0" {
		t.Fatalf("describe: %+v", d)
	}
	if err := ExpectType(d, plugin.TypeBackend); err == nil || !strings.Contains(err.Error(), `type "builder", which is not used by this core yet`) {
		t.Fatalf("a backend-only core must refuse a builder clearly, got %v", err)
	}
	if err := ExpectType(d, plugin.TypeBuilder); err != nil {
		t.Fatal(err)
	}
	if err := c.Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), nil); err != nil {
		t.Fatal(err)
	}
	spec := builder.PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", Packages: []builder.Package{{Name: "numpy"}, {Name: "scipy"}}}
	p, err := c.Builder().Plan(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	res, err := c.Builder().Build(context.Background(), builder.BuildRequest{Spec: spec, CacheKey: p.CacheKey},
		func(pr builder.Progress) {
			steps = append(steps, fmt.Sprintf("%d/%d %s", pr.Step, pr.Steps, pr.Message))
		})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(steps, ",") != "1/2 numpy,2/2 scipy" || res.CacheKey != p.CacheKey || len(res.Lock) != 2 || res.Lock[1].Name != "scipy" {
		t.Fatalf("build: steps %q, result %+v", steps, res)
	}
	// The Plugin service is common; another type's service is not served.
	if _, err := c.Backend().Execute(context.Background(), backend.ExecuteRequest{Code: "x"}); err == nil {
		t.Fatal("a builder plugin answered Execute")
	}
}

// A bridge binary launches and answers through the shims.
func TestLaunchBridgePlugin(t *testing.T) {
	c, err := Launch(buildTestPlugin(t, "bridgeplugin"), hclog.NewNullLogger(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	d, err := c.Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != plugin.TypeBridge || d.Name != "testbridge" {
		t.Fatalf("describe: %+v", d)
	}
	if err := ExpectType(d, plugin.TypeBackend); err == nil || !strings.Contains(err.Error(), `type "bridge", which is not used by this core yet`) {
		t.Fatalf("a backend-only core must refuse a bridge clearly, got %v", err)
	}
	if err := c.Configure(context.Background(), sdktest.NewLocalHost(t.TempDir()), nil); err != nil {
		t.Fatal(err)
	}
	tools, err := c.Bridge().ListTools(context.Background())
	if err != nil || len(tools) != 1 || tools[0].ID() != "echo.say" {
		t.Fatalf("tools: %+v %v", tools, err)
	}
	res, err := c.Bridge().CallTool(context.Background(), bridge.CallRequest{Server: "echo", Tool: "say", Arguments: json.RawMessage(`{"x":1}`)})
	if err != nil || string(res.Structured) != `{"x":1}` {
		t.Fatalf("call: %+v %v", res, err)
	}
	res, err = c.Bridge().CallTool(context.Background(), bridge.CallRequest{Server: "echo", Tool: "nope"})
	if err != nil || !res.IsError {
		t.Fatalf("unknown tool: want an error result, got %+v %v", res, err)
	}
	files, err := c.Bridge().Generate(context.Background(), bridge.GenerateRequest{Language: "python", Tools: []string{"echo.say"}})
	if err != nil || string(files["echo.say.txt"]) != "call echo.say" {
		t.Fatalf("generate: %q %v", files, err)
	}
}

// A type no SDK knows is refused as such.
func TestExpectTypeUnknown(t *testing.T) {
	err := ExpectType(Described{Name: "odd", Type: "gizmo"}, plugin.TypeBackend)
	if err == nil || !strings.Contains(err.Error(), "no MCP-Forge SDK knows") {
		t.Fatalf("got %v", err)
	}
	if err := ExpectType(Described{Name: "b", Type: plugin.TypeBackend}, plugin.TypeBackend); err != nil {
		t.Fatal(err)
	}
}

// A plugin named by a path relative to the core's directory starts in
// another directory (Options.Dir, a builder's work directory) all the same.
func TestLaunchRelativePathInDir(t *testing.T) {
	bin := buildTestPlugin(t, "builderplugin")
	// A path beneath the test's directory, with no "..": from Dir it names
	// nothing.
	local, err := os.MkdirTemp(".", "plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(local) })
	rel := filepath.Join(local, filepath.Base(bin))
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rel, data, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := Launch(rel, hclog.NewNullLogger(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("launch %s in another directory: %v", rel, err)
	}
	c.Kill()
}
