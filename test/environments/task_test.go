package environments

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// build_environment as an MCP Task through the TypeScript SDK's own task
// API (test/node/build-task.mjs): the build answers at once with the task,
// its result is the image; a waiting build is cancelled, and the builder
// really stops (its partial layer goes, no image is left).
func TestBuildAsTaskTypeScriptSDK(t *testing.T) {
	base, toml := demoConfig(t, "")
	dir := filepath.Join(testenv.RepoRoot(), "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("@modelcontextprotocol/sdk is not installed: run `npm ci` in test/node (make test does)")
	}
	cfg := filepath.Join(base, "forge.toml")
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "build-task.mjs", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log"),
		"FORGE_ENVIRONMENT_BUILDER_UV_CACHE_PATH="+filepath.Join(base, "uv-cache"))
	cmd.Env = append(cmd.Env, testenv.RuntimeEnv(t)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: build tasks") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	ok := string(out[strings.LastIndex(string(out), "ok: "):])
	t.Logf("%s", ok[:strings.IndexByte(ok+"\n", '\n')])
	log, _ := os.ReadFile(filepath.Join(base, "builds", "forgedemo", "calls.log"))
	if !strings.Contains(string(log), "build slowpkg") {
		t.Fatalf("the slow build never reached the builder: %s", log)
	}
	testenv.WaitFor(t, "the cancelled build's partial layer to go", 30*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(base, "builds", "forgedemo", "partial-*"))
		return len(m) == 0
	})
}
