package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// isolationBench: one call through MCP on a server whose sandboxes run
// under runc (container) against the same on one whose sandboxes run under
// gVisor, both started in this run with the bench configuration and
// called in turn, so that load weighs on both alike. sid "" is a
// stateless run (a warm runner each); else a session's execute, its
// kernel reached through the agent's relay under gVisor.
func isolationBench(b *testing.B, code, sid string) {
	if _, err := os.Stat("/usr/local/lib/mcp-forge/runsc"); err != nil {
		b.Skip("runsc is not installed (make setup installs it)")
	}
	servers := map[string]*testenv.Server{
		"container": testenv.StartServer(b, benchConfig+"[security]\nisolation = \"container\"\n"),
		"gvisor":    testenv.StartServer(b, benchConfig+"[security]\nisolation = \"gvisor\"\n"),
	}
	call := func(s *testenv.Server) error {
		args := map[string]any{"code": code}
		if sid != "" {
			args["session_id"] = sid
		}
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: args})
		if err == nil && res.IsError {
			b.Fatalf("execute failed: %s", testenv.Text(res))
		}
		return err
	}
	for _, s := range servers {
		for range 3 { // plugins, images and pools warm; the session started
			if err := call(s); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := b.N
	b.ResetTimer()
	got := map[string][]time.Duration{}
	for range n {
		for _, iso := range []string{"container", "gvisor"} {
			d, err := measure(1, func() error { return call(servers[iso]) })
			if err != nil {
				b.Fatal(err)
			}
			got[iso] = append(got[iso], d...)
		}
	}
	b.StopTimer()
	cm, cp := stats(got["container"])
	gm, gp := stats(got["gvisor"])
	b.ReportMetric(cm, "runc-median-ms")
	b.ReportMetric(cp, "runc-p90-ms")
	b.ReportMetric(gm, "gvisor-median-ms")
	b.ReportMetric(gp, "gvisor-p90-ms")
	b.ReportMetric(gm-cm, "gvisor-over-median-ms")
	b.ReportMetric(gm/cm, "gvisor-ratio-median")
	b.Logf("%q (session %q), %d runs each: runc median %.2f ms p90 %.2f ms; gVisor median %.2f ms p90 %.2f ms; gVisor %.2f ms over, %.2fx",
		code, sid, n, cm, cp, gm, gp, gm-cm, gm/cm)
}

// BenchmarkIsolationSessionPython: `y = 1` in a Python session, gVisor
// against runc (goal: at most 2 ms over).
func BenchmarkIsolationSessionPython(b *testing.B) { isolationBench(b, "y = 1", "iso") }

// BenchmarkIsolationStatelessPython: a stateless `print(1)` back to back,
// each on a warm runner, gVisor against runc.
func BenchmarkIsolationStatelessPython(b *testing.B) { isolationBench(b, "print(1)", "") }
