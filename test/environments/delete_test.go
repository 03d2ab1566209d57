package environments

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// delete_environment right after a run in the environment succeeds: the
// run's container, removed in the background after the answer, no longer
// holds the image ("image is in use by a container"). A session that runs
// in it does hold it: the delete is refused saying so (a request error,
// audited as a refusal, never as a critical security event), and succeeds
// once the session is destroyed.
func TestDeleteRightAfterARun(t *testing.T) {
	s := start(t, "")
	ctx := context.Background()
	if o, res := build(t, s, map[string]any{"name": "quick", "packages": []string{"forgedemo"}}); res.IsError || !o.Success {
		t.Fatal(testenv.Text(res))
	}
	for _, round := range []string{"cold start", "again"} {
		var o mcpserver.ExecuteOutput
		if res := s.Call(t, "execute_python", map[string]any{"code": "import forgedemo\nprint('ok')", "custom_image": "mcp-forge/custom:quick"}, &o); res.IsError || o.Stdout != "ok\n" {
			t.Fatalf("%s: run in the environment: %s", round, testenv.Text(res))
		}
		if round == "again" {
			break
		}
		// A session in the environment holds it.
		if res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "inenv", "custom_image": "mcp-forge/custom:quick"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		var del mcpserver.DeleteEnvironmentOutput
		res := s.Call(t, "delete_environment", map[string]any{"name": "quick"}, &del)
		if !res.IsError || del.Deleted || del.Error == nil || del.Error.Type != "RequestError" || !strings.Contains(del.Error.Message, environments.RuleInUse) || !strings.Contains(del.Error.Message, "destroy_session") {
			t.Fatalf("delete while a session runs in it: %s %+v", testenv.Text(res), del.Error)
		}
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "inenv"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
	}
	var del mcpserver.DeleteEnvironmentOutput
	if res := s.Call(t, "delete_environment", map[string]any{"name": "quick"}, &del); res.IsError || !del.Deleted {
		t.Fatalf("delete right after a run: %s", testenv.Text(res))
	}
	if _, ok, _ := testenv.Images(t).Image(ctx, "mcp-forge/custom:quick"); ok {
		t.Fatal("the image is still there")
	}
	refusals := 0
	for _, e := range auditLines(t, s) {
		if e.Event == environments.EventRefused && e.Details["rule"] == environments.RuleInUse && e.Severity == audit.Warning {
			refusals++
		}
		if e.Severity == audit.Critical {
			t.Errorf("critical audit line: %+v", e)
		}
		if e.Event == environments.EventDelete && !e.Success {
			t.Errorf("a failed delete: %+v", e)
		}
	}
	if refusals != 1 {
		t.Errorf("%d refusals with rule %s audited at warning, want the one while the session ran", refusals, environments.RuleInUse)
	}
}

// auditLines are the audit log's entries.
func auditLines(t *testing.T, s *testenv.Server) []audit.Entry {
	t.Helper()
	b, err := os.ReadFile(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Entry
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e audit.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line is not JSON: %q", line)
		}
		out = append(out, e)
	}
	return out
}
