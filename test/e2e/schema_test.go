package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// The MCP Inspector (a client nobody on this project wrote) finds nothing
// unportable in the real server's tool schemas with --strict, and the real
// tools/list is the reviewed snapshot core/mcpserver/testdata/tools.golden.json
// (which the unit test builds from fakes reporting what the plugins report).
func TestToolSchemasStrictAndGolden(t *testing.T) {
	dir, cfg := nodeSetup(t, "inspector")
	base := filepath.Dir(cfg)
	cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", "mcp-inspector"), "--cli", "-e", "FORGE_CONFIG="+cfg, "--method", "tools/list", "--strict", "--format", "json", "--", testenv.Binary(t), "serve")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(base, "inspector-catalog.json"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspector: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var out struct {
		Result struct {
			Tools []any `json:"tools"`
		} `json:"result"`
		SchemaFindings []any `json:"schemaFindings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(out.Result.Tools) == 0 {
		t.Fatalf("no tools: %s", stdout.String())
	}
	if n := len(out.SchemaFindings); n > 0 {
		t.Fatalf("the strict check reports %d findings:\n%s", n, stderr.String())
	}
	// MCP Tasks mark the task tools at the wire (core/mcpserver/tasks),
	// past what the unit test's go-sdk client decodes: checked here, then
	// set aside for the comparison.
	for _, tool := range out.Result.Tools {
		m, _ := tool.(map[string]any)
		name, _ := m["name"].(string)
		exec, marked := m["execution"].(map[string]any)
		if task := strings.HasPrefix(name, "execute_") || name == "build_environment"; task != (marked && exec["taskSupport"] == "optional") {
			t.Errorf("%s: execution %v; want taskSupport optional on execute_* and build_environment only", name, m["execution"])
		}
		delete(m, "execution")
	}
	got, _ := json.Marshal(out.Result.Tools)
	var v any
	json.Unmarshal(got, &v)
	got, _ = json.MarshalIndent(v, "", "  ")
	got = append(got, '\n')
	want, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "core", "mcpserver", "testdata", "tools.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		os.WriteFile(filepath.Join(base, "tools.json"), got, 0o600)
		t.Fatalf("the real tools/list differs from the golden snapshot (see %s/tools.json): the plugins report something the unit test's fixture does not", base)
	}
	t.Logf("%d tools, 0 schema findings", len(out.Result.Tools))
}
