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

// benchConfig lifts the default CPU quota (half a core) to the machine's two
// cores, so that ratios against an unlimited bare `podman run` or raw kernel
// measure MCP-Forge's overhead rather than the quota.
const benchConfig = "[execution]\ndefault_cpu_quota = 200000\nmax_cpu_quota = 200000\n"

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

// statelessBench compares a tool call through MCP with a bare `podman run
// --rm` of the same image and command, measured in the same run.
func statelessBench(b *testing.B, tool, code string, bare []string) {
	statelessBenchConfig(b, benchConfig+coldConfig, tool, code, bare)
}

// statelessBenchConfig is statelessBench on a server configured with cfg.
func statelessBenchConfig(b *testing.B, cfg, tool, code string, bare []string) *testenv.Server {
	s := testenv.StartServer(b, cfg)
	n := b.N
	call := func() error {
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"code": code}})
		if err == nil && res.IsError {
			b.Fatalf("%s failed: %s", tool, testenv.Text(res))
		}
		return err
	}
	run := func() error {
		out, err := exec.Command("podman", append([]string{"run", "--rm", "--network", "none"}, bare...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		return nil
	}
	call() // plugin start and first connection are not the steady state
	run()
	b.ResetTimer()
	forge, err := measure(n, call)
	if err != nil {
		b.Fatal(err)
	}
	base, err := measure(n, run)
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
	b.Logf("%s %q, %d runs each: forge median %.0f ms p90 %.0f ms; bare podman run median %.0f ms p90 %.0f ms; ratio %.2f", tool, code, n, fm, fp, bm, bp, fm/bm)
	return s
}

// coldConfig turns the stateless plugins' warm pools off: the cold figures
// are those of a container started for the run.
const coldConfig = "[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n"

// BenchmarkStatelessPython: execute_python of print(1) vs podman run python3 -c.
func BenchmarkStatelessPython(b *testing.B) {
	statelessBench(b, "execute_python", "print(1)", []string{"mcp-forge/python:3.11", "python3", "-c", "print(1)"})
}

// BenchmarkStatelessColdDefault: a cold run (the pools off) with the
// default configuration, half a core per run, vs a bare podman run: the
// cold path a user's run takes when the pool is empty (issue 26), and
// where its time goes (the audit log's phases).
func BenchmarkStatelessColdDefault(b *testing.B) {
	for _, lp := range loadPlugins {
		b.Run(lp.plugin, func(b *testing.B) {
			s := statelessBenchConfig(b, coldConfig, "execute_"+lp.plugin, lp.code, lp.bare)
			readColdPhases(b, s.AuditLog).report(b)
			// The container alone, no interpreter: what the isolation
			// rule costs before any language does.
			d, err := measure(max(b.N/2, 5), func() error {
				return exec.Command("podman", "run", "--rm", "--network", "none", lp.bare[0], "true").Run()
			})
			if err != nil {
				b.Fatal(err)
			}
			m, _ := stats(d)
			b.ReportMetric(m, "podman-run-true-median-ms")
			b.Logf("bare podman run of true in %s: median %.0f ms", lp.bare[0], m)
		})
	}
}

// BenchmarkStatelessR: execute_r of print(1) vs podman run Rscript -e.
func BenchmarkStatelessR(b *testing.B) {
	statelessBench(b, "execute_r", "print(1)", []string{"mcp-forge/r:4.2", "Rscript", "-e", "print(1)"})
}
