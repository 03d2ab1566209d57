package bench

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func sessionCall(b *testing.B, s *testenv.Server, tool, sid, code string) error {
	res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"code": code, "session_id": sid}})
	if err == nil && res.IsError {
		b.Fatalf("session execute failed: %s", testenv.Text(res))
	}
	return err
}

// sessionBench: a session execute of code through MCP against the raw kernel
// round trip of sdk/jupyter (no MCP, no plugin, no core), both measured in
// this run, one of each in turn (BenchmarkSessionStartPython measures
// session starts).
func sessionBench(b *testing.B, tool, image string, kernelCmd func(string) []string, code string) {
	s := testenv.StartServer(b, benchConfig)
	n := b.N
	sessionCall(b, s, tool, "warm", "1") // plugin and image warm
	b.ResetTimer()
	b.StopTimer()
	kernel := sdktest.StartKernel(b, image, kernelCmd)
	ctx := context.Background()
	kernel.Run(ctx, "1", jupyter.ExecuteOptions{})
	b.StartTimer()
	// Interleaved, one of each in turn, so that load from elsewhere on a
	// shared machine weighs on both alike.
	var forge, raw []time.Duration
	for range n {
		f, err := measure(1, func() error { return sessionCall(b, s, tool, "warm", code) })
		if err != nil {
			b.Fatal(err)
		}
		r, err := measure(1, func() error {
			_, _, err := kernel.Run(ctx, code, jupyter.ExecuteOptions{})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		forge, raw = append(forge, f...), append(raw, r...)
	}
	b.StopTimer()
	fm, fp := stats(forge)
	rm, rp := stats(raw)
	b.ReportMetric(fm, "session-median-ms")
	b.ReportMetric(fp, "session-p90-ms")
	b.ReportMetric(rm, "kernel-median-ms")
	b.ReportMetric(rp, "kernel-p90-ms")
	b.ReportMetric(fm/rm, "ratio-median")
	b.Logf("%s session %q, %d runs: forge median %.2f ms p90 %.2f ms; raw kernel round trip median %.2f ms p90 %.2f ms; ratio %.2f",
		tool, code, n, fm, fp, rm, rp, fm/rm)
}

// BenchmarkSessionPython: `y = 1` in a Python session vs the raw ipykernel round trip.
func BenchmarkSessionPython(b *testing.B) {
	sessionBench(b, "execute_python", "mcp-forge/python:3.11", sdktest.IPyKernel, "y = 1")
}

// BenchmarkSessionR: `y <- 1` in an R session vs the raw IRkernel round trip.
func BenchmarkSessionR(b *testing.B) {
	sessionBench(b, "execute_r", "mcp-forge/r:4.2", sdktest.IRKernel, "y <- 1")
}
