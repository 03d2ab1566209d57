package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A client nobody on this project wrote — the official TypeScript SDK from
// npm — lists the tools and runs calls against the real server.
func TestTypeScriptSDKClient(t *testing.T) {
	dir, cfg := nodeSetup(t, "sdk")
	cmd := exec.Command("node", "client.mjs", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: tools=") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// nodeSetup checks that test/node has the npm package @modelcontextprotocol/<pkg>
// and writes a server configuration on the test's own base path. It returns
// test/node and the configuration file.
func nodeSetup(t *testing.T, pkg string) (dir, cfg string) {
	t.Helper()
	testenv.Require(t)
	dir = filepath.Join(testenv.RepoRoot(), "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg)); err != nil {
		t.Fatalf("@modelcontextprotocol/%s is not installed: run `npm ci` in test/node (make test does)", pkg)
	}
	base := testenv.BaseDir(t)
	cfg = filepath.Join(base, "forge.toml")
	os.WriteFile(cfg, []byte("[volumes]\nbase_path = \""+base+"\"\n[security]\naudit_log = \""+base+"/audit.log\"\n"), 0o600)
	return dir, cfg
}
