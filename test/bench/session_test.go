package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func sessionCall(b *testing.B, s *testenv.Server, sid, code string) error {
	res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": code, "session_id": sid}})
	if err == nil && res.IsError {
		b.Fatalf("session execute failed: %s", testenv.Text(res))
	}
	return err
}

// BenchmarkSessionPython: a session execute of `y = 1` through MCP against
// the raw kernel round trip of sdk/jupyter (no MCP, no plugin, no core),
// both measured in this run; and session start (the first execute).
func BenchmarkSessionPython(b *testing.B) {
	s := testenv.StartServer(b, "")
	n := max(b.N, 100)
	starts := 5
	sessionCall(b, s, "warm", "1") // plugin and image warm
	b.ResetTimer()
	start, err := measure(starts, func() error {
		return sessionCall(b, s, fmt.Sprintf("start%d", len(fmt.Sprint(b.N))+int(nextID())), "1")
	})
	if err != nil {
		b.Fatal(err)
	}
	forge, err := measure(n, func() error { return sessionCall(b, s, "warm", "y = 1") })
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	kernel := sdktest.StartKernel(b, "mcp-forge/python:3.11", sdktest.IPyKernel)
	ctx := context.Background()
	kernel.Run(ctx, "1", jupyter.ExecuteOptions{})
	b.StartTimer()
	raw, err := measure(n, func() error {
		_, _, err := kernel.Run(ctx, "y = 1", jupyter.ExecuteOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	fm, fp := stats(forge)
	rm, rp := stats(raw)
	sm, _ := stats(start)
	b.ReportMetric(fm, "session-median-ms")
	b.ReportMetric(fp, "session-p90-ms")
	b.ReportMetric(rm, "kernel-median-ms")
	b.ReportMetric(rp, "kernel-p90-ms")
	b.ReportMetric(fm/rm, "ratio-median")
	b.ReportMetric(sm, "session-start-median-ms")
	b.Logf("session execute y = 1, %d runs: forge median %.2f ms p90 %.2f ms; raw kernel round trip median %.2f ms p90 %.2f ms; ratio %.2f; session start median %.0f ms over %d",
		n, fm, fp, rm, rp, fm/rm, sm, starts)
}

var idCounter int64

func nextID() int64 { idCounter++; return idCounter }
