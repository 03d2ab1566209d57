package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

func TestAuditDrivenCountsAndBoundedLabels(t *testing.T) {
	m := New(Source{Sessions: func() map[string]int { return map[string]int{"alice": 2, "intruder": 1} }},
		[]string{"alice", "bob"}, []string{"python"}, []string{"python", "jupyter"})
	run := func(id, user, lang string, done audit.Entry) {
		m.Audit(audit.Entry{Event: audit.ExecutionRequest, UserID: user, Details: map[string]any{"run_id": id, "language": lang}})
		done.Event, done.UserID = audit.ExecutionComplete, user
		if done.Details == nil {
			done.Details = map[string]any{}
		}
		done.Details["run_id"], done.Details["backend"], done.Details["duration_ms"] = id, "python", int64(250)
		m.Audit(done)
	}
	run("1", "alice", "python", audit.Entry{Success: true})
	run("2", "alice", "python", audit.Entry{Success: false})                               // the code failed
	run("3", "bob", "python", audit.Entry{Severity: audit.Warning, Error: "bad request"})  // rejected
	run("4", "bob", "python", audit.Entry{Severity: audit.Error, Error: "plugin crashed"}) // server error
	run("5", "eve-unknown", "cobol", audit.Entry{Success: true})                           // bounded labels
	m.Audit(audit.Entry{Event: audit.SecurityViolation, Details: map[string]any{"rule": "privileged"}})
	m.Audit(audit.Entry{Event: audit.SecurityViolation, Details: map[string]any{"rule": "privileged"}})
	m.QuotaRefused("bob", "max_sessions")
	m.ToolCall("alice", "list_sessions", "success", time.Millisecond)

	for labels, want := range map[[4]string]float64{
		{"alice", "python", "python", "success"}:    1,
		{"alice", "python", "python", "error"}:      1,
		{"bob", "python", "python", "rejected"}:     1,
		{"bob", "python", "python", "server_error"}: 1,
		{Other, Other, "python", "success"}:         1,
	} {
		if got := testutil.ToFloat64(m.executions.WithLabelValues(labels[:]...)); got != want {
			t.Errorf("executions%v = %v, want %v", labels, got, want)
		}
	}
	if got := testutil.ToFloat64(m.refusals.WithLabelValues("privileged")); got != 2 {
		t.Errorf("policy refusals = %v", got)
	}
	if got := testutil.ToFloat64(m.quota.WithLabelValues("bob", "max_sessions")); got != 1 {
		t.Errorf("quota refusals = %v", got)
	}
	if len(m.runs) != 0 {
		t.Errorf("run table not emptied: %v", m.runs)
	}
	exp := `
# HELP mcp_forge_sessions_live Live stateful sessions per tenant.
# TYPE mcp_forge_sessions_live gauge
mcp_forge_sessions_live{tenant="alice"} 2
mcp_forge_sessions_live{tenant="bob"} 0
mcp_forge_sessions_live{tenant="other"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(exp), "mcp_forge_sessions_live"); err != nil {
		t.Error(err)
	}
}

// docs/operations.md documents every metric the server exports.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := New(Source{Sessions: func() map[string]int { return nil }, PluginRestarts: func() map[string]int { return map[string]int{"p": 0} },
		WarmPools: func() map[string]Pool {
			return map[string]Pool{"p": {Target: 3, Ready: 2, Hits: 5, Misses: 1, Grown: 1}}
		}}, []string{"a"}, nil, nil)
	exp := `
# HELP mcp_forge_warm_pool_target Ready containers a backend's warm pool refills to now (grown by misses, shrunk when quiet).
# TYPE mcp_forge_warm_pool_target gauge
mcp_forge_warm_pool_target{plugin="p"} 3
# HELP mcp_forge_warm_pool_grown_total Misses that grew a warm pool's target.
# TYPE mcp_forge_warm_pool_grown_total counter
mcp_forge_warm_pool_grown_total{plugin="p"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(exp), "mcp_forge_warm_pool_target", "mcp_forge_warm_pool_grown_total"); err != nil {
		t.Error(err)
	}
	// Vectors appear once they have a child.
	m.Audit(audit.Entry{Event: audit.ExecutionComplete, Success: true})
	m.Audit(audit.Entry{Event: audit.SecurityViolation})
	m.ToolCall("a", "t", "success", 0)
	m.QuotaRefused("a", "q")
	m.HTTPResponse(200)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if name := f.GetName(); strings.HasPrefix(name, "mcp_forge_") {
			n++
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("docs/operations.md does not document %s", name)
			}
		}
	}
	if n < 9 {
		t.Fatalf("only %d mcp_forge_ families gathered", n)
	}
}
