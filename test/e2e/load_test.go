package e2e

import (
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// 50 stateless runs and an execute in each of 20 live sessions, all at
// once, finish without a single error within a bound; the p95 latencies
// are logged (make bench reports them against their goals).
func TestConcurrentRunsAndSessions(t *testing.T) {
	s := testenv.StartServer(t, "[sessions]\nmax_concurrent = 25\n")
	start := time.Now()
	r := testenv.Load(t, s.Session, 50, 20)
	for _, e := range r.Errors {
		t.Error(e)
	}
	if len(r.Stateless) != 50 || len(r.Session) != 20 {
		t.Errorf("%d stateless runs and %d session executes succeeded, want 50 and 20", len(r.Stateless), len(r.Session))
	}
	// Generous for two shared cores: the load itself takes about a tenth.
	if took := time.Since(start); took > 8*time.Minute {
		t.Errorf("the load took %s", took)
	}
	t.Logf("stateless p95 %.0f ms, session p95 %.0f ms, the burst took %s (sessions opened before it)",
		testenv.Percentile(r.Stateless, 95), testenv.Percentile(r.Session, 95), r.Took.Round(time.Millisecond))
}
