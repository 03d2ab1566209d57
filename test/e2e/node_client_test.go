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
	os.WriteFile(cfg, []byte(testenv.Lean(t, "[volumes]\nbase_path = \""+base+"\"\n[security]\naudit_log = \""+base+"/audit.log\"\n")), 0o600)
	return dir, cfg
}

// Answers near and past the 10 MiB the TypeScript SDK's stdio transport
// accepts (it drops the connection, and the server exits): files of 8,
// 9.9 and 10 MiB come back in parts byte for byte, and outputs that escape
// to many times their size (control bytes, NULs, invalid UTF-8, long lines)
// come back cut, once, the connection alive (test/node/big-answers.mjs).
func TestTypeScriptSDKBigAnswers(t *testing.T) {
	testenv.Parallel(t)
	dir, cfg := nodeSetup(t, "sdk")
	cmd := exec.Command("node", "big-answers.mjs", "stdio", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: largest answer") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
