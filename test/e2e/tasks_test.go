package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// MCP Tasks over stdio through the TypeScript SDK's own task API
// (test/node/tasks.mjs): a Python job as a task, seen working, its result;
// one cancelled; one listed and its result fetched later; an unknown
// task, a refused call as a failed task, and a call without a task as
// before. The HTTP side, with tenants and reconnecting, is in test/http.
func TestTypeScriptSDKTasks(t *testing.T) {
	testenv.Parallel(t)
	dir, cfg := nodeSetup(t, "sdk")
	cmd := exec.Command("node", "tasks.mjs", "stdio", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: tasks over stdio") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", lastLine(string(out), "ok: "))
}
