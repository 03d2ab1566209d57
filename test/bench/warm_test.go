package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// warmBench measures a tool call served by a warm container through MCP,
// and a bare `podman run --rm` of the same image in the same run. Before
// each call it waits (untimed) for the pool to be full again, so every
// measured call is a hit and no refill competes with it for the CPU (an
// agent's calls are seconds apart); the hits are checked.
func warmBench(b *testing.B, plugin, code string, bare []string) {
	s := testenv.StartServer(b, benchConfig+"[plugins."+plugin+".config]\nwarm = 2\n")
	tool := "execute_" + plugin
	call := func() {
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"code": code}})
		if err != nil || res.IsError {
			b.Fatalf("%s failed: %v %s", tool, err, testenv.Text(res))
		}
	}
	run := func() error {
		out, err := exec.Command("podman", append([]string{"run", "--rm", "--network", "none"}, bare...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		return nil
	}
	testenv.WaitWarm(b, s.Session, plugin, 1)
	call() // the plugin's first connection is not the steady state
	run()
	n := b.N
	b.ResetTimer()
	b.StopTimer()
	before := testenv.WaitWarm(b, s.Session, plugin, 2)
	forge := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		testenv.WaitWarm(b, s.Session, plugin, 2)
		b.StartTimer()
		t0 := time.Now()
		call()
		forge = append(forge, time.Since(t0))
		b.StopTimer()
	}
	after := testenv.Pool(b, s.Session, plugin)
	if hits := after.Hits - before.Hits; hits != int64(n) {
		b.Fatalf("%d of %d calls were served warm: %+v", hits, n, after)
	}
	base, err := measure(n, run)
	if err != nil {
		b.Fatal(err)
	}
	fm, fp := stats(forge)
	bm, bp := stats(base)
	b.ReportMetric(fm, "forge-median-ms")
	b.ReportMetric(fp, "forge-p90-ms")
	b.ReportMetric(bm, "podman-run-median-ms")
	b.ReportMetric(bp, "podman-run-p90-ms")
	b.ReportMetric(fm/bm, "ratio-median")
	b.ReportMetric(float64(after.MeanRefill), "refill-mean-ms")
	b.Logf("%s %q warm, %d runs each: forge median %.1f ms p90 %.1f ms; bare podman run median %.0f ms p90 %.0f ms; ratio %.3f; pool %+v",
		tool, code, n, fm, fp, bm, bp, fm/bm, *after)
}

// BenchmarkStatelessWarmPython: execute_python of print(1) on a warm
// container vs podman run python3 -c. Goal: 25 ms median.
func BenchmarkStatelessWarmPython(b *testing.B) {
	warmBench(b, "python", "print(1)", []string{"mcp-forge/python:3.11", "python3", "-c", "print(1)"})
}

// BenchmarkStatelessWarmR: execute_r of cat(1) on a warm container vs
// podman run Rscript -e. Goal: 40 ms median.
func BenchmarkStatelessWarmR(b *testing.B) {
	warmBench(b, "r", "cat(1)", []string{"mcp-forge/r:4.2", "Rscript", "-e", "cat(1)"})
}

// podmanRunBench is the bare baseline alone: `podman run --rm` of the
// image and command.
func podmanRunBench(b *testing.B, bare []string) {
	testenv.Require(b)
	run := func() error {
		out, err := exec.Command("podman", append([]string{"run", "--rm", "--network", "none"}, bare...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		return nil
	}
	run()
	b.ResetTimer()
	d, err := measure(b.N, run)
	if err != nil {
		b.Fatal(err)
	}
	m, p := stats(d)
	b.ReportMetric(m, "median-ms")
	b.ReportMetric(p, "p90-ms")
}

// BenchmarkPodmanRunPython: podman run --rm python3 -c 'print(1)'.
func BenchmarkPodmanRunPython(b *testing.B) {
	podmanRunBench(b, []string{"mcp-forge/python:3.11", "python3", "-c", "print(1)"})
}

// BenchmarkPodmanRunR: podman run --rm Rscript -e 'cat(1)'.
func BenchmarkPodmanRunR(b *testing.B) {
	podmanRunBench(b, []string{"mcp-forge/r:4.2", "Rscript", "-e", "cat(1)"})
}
