package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// gvisorServer starts a server whose sandboxes run under gVisor with
// extra configuration, and a call that times a tool call and fails the
// benchmark on an error (out, if not nil, gets the structured result).
func gvisorServer(b *testing.B, extra string) (*testenv.Server, func(tool string, args map[string]any, out any) time.Duration) {
	requireRunsc(b)
	s := testenv.StartServer(b, benchConfig+"[security]\nisolation = \"gvisor\"\n"+extra)
	return s, func(tool string, args map[string]any, out any) time.Duration {
		t0 := time.Now()
		res := testenv.Call(b, s.Session, tool, args, out)
		if res.IsError {
			b.Fatalf("%s: %s", tool, testenv.Text(res))
		}
		return time.Since(t0)
	}
}

// BenchmarkResume100MB: issue 43's resume of a suspended gVisor session
// holding 100 MiB, from the call to its first result (the goal is 1 s),
// b.N sessions each suspended by sessions.suspend_after and resumed by its
// next execute.
func BenchmarkResume100MB(b *testing.B) {
	_, call := gvisorServer(b, "[sessions]\nsuspend_after = 3\ncleanup_interval = 1\n")
	var resume []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		id := fmt.Sprintf("r%d", i)
		call("execute_python", map[string]any{"session_id": id, "code": "import os, hashlib\nblob = os.urandom(100 << 20)\ndigest = hashlib.sha256(blob).hexdigest()"}, nil)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			var l mcpserver.SessionsOutput
			call("list_sessions", map[string]any{}, &l)
			if len(l.Sessions) == 0 && len(l.Checkpoints) > 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("session %s was not suspended: %+v", id, l)
			}
		}
		b.StartTimer()
		var o struct {
			Stdout string `json:"stdout"`
		}
		d := call("execute_python", map[string]any{"session_id": id, "code": "print(hashlib.sha256(blob).hexdigest() == digest)"}, &o)
		if strings.TrimSpace(o.Stdout) != "True" {
			b.Fatalf("resumed session %s: %q", id, o.Stdout)
		}
		resume = append(resume, d)
		b.StopTimer()
		call("destroy_session", map[string]any{"session_id": id}, nil)
		b.StartTimer()
	}
	b.StopTimer()
	med, p90 := stats(resume)
	b.ReportMetric(med, "resume-median-ms")
	b.Logf("100 MiB session, %d resumes: median %.0f ms, p90 %.0f ms (call to first result)", b.N, med, p90)
}
