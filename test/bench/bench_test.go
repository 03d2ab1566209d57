// Package bench measures MCP-Forge against baselines taken in the same run.
// Run with `make bench`; figures are reported as custom metrics.
package bench

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// stats returns the median and 90th percentile in milliseconds.
func stats(d []time.Duration) (median, p90 float64) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	return ms(s[len(s)/2]), ms(s[(len(s)*9+9)/10-1])
}

func measure(n int, f func() error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// BenchmarkStatelessPython: execute_python of print(1) through MCP against
// a bare `podman run --rm` of the same image and command, in the same run.
func BenchmarkStatelessPython(b *testing.B) {
	s := testenv.StartServer(b, "")
	n := max(b.N, 20)
	call := func() error {
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "print(1)"}})
		if err == nil && res.IsError {
			b.Fatalf("execute_python failed: %s", testenv.Text(res))
		}
		return err
	}
	call() // plugin start and first connection are not part of the steady state
	bare := func() error {
		out, err := exec.Command("podman", "run", "--rm", "--network", "none", "mcp-forge/python:3.11", "python3", "-c", "print(1)").CombinedOutput()
		if err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		return nil
	}
	bare()
	b.ResetTimer()
	forge, err := measure(n, call)
	if err != nil {
		b.Fatal(err)
	}
	base, err := measure(n, bare)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	fm, fp := stats(forge)
	bm, bp := stats(base)
	b.ReportMetric(fm, "forge-median-ms")
	b.ReportMetric(fp, "forge-p90-ms")
	b.ReportMetric(bm, "podman-run-median-ms")
	b.ReportMetric(bp, "podman-run-p90-ms")
	b.ReportMetric(fm/bm, "ratio-median")
	b.ReportMetric(float64(n), "runs")
	b.Logf("stateless print(1), %d runs each: forge median %.0f ms p90 %.0f ms; bare podman run median %.0f ms p90 %.0f ms; ratio %.2f", n, fm, fp, bm, bp, fm/bm)
}
