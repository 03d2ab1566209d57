package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/forge/pluginset"
	"github.com/mcp-forge/mcp-forge/core/hostsvc"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// PluginHost returns the real core's host services bound to plugin name
// (policy, audit, ownership, workspaces under <base>/sessions, which it
// also returns), and the settings the core would configure it with: what
// sdktest.Launch needs to run the conformance suite in real mode.
func (c *Core) PluginHost(t testing.TB, name string) (host.Host, string, []byte) {
	t.Helper()
	ws := workspace.New(c.Base, c.Manager.ServerTag(), int64(c.Config.Volumes.SessionQuota), nil) // plain directories: the conformance suite tests plugins, not the quota
	if err := os.MkdirAll(ws.Root(), 0o711); err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(pluginset.Settings(c.Config)(name))
	if err != nil {
		t.Fatal(err)
	}
	return hostsvc.New(name, c.Manager, c.Audit, ws), ws.Root(), cfg
}

// BuildPlugin builds the Go package at pkg (a path relative to the test's
// directory, or a module path) into a temporary binary.
func BuildPlugin(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-"+filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
