package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// pace is how often an agent calls: one call a second. Unlike the warm
// benchmarks, nothing waits for the pool to be full before a call, so the
// refill a call starts competes with it as it does for an agent.
const pace = time.Second

// pacedBlock is how many calls in a row one server takes before the other
// has its turn. Called at once, the two servers' refills (a container start
// each, about a core-second) landed on each other's calls on two cores and
// decided the figures; in turns, each server's calls see only its own
// refills, and the blocks interleave so both see the same machine.
const pacedBlock = 5

// inBlocks calls each of ws n times, one call every `every` (0: each as
// soon as the last answered), in turns of pacedBlock calls of one server,
// and returns each server's call times.
func inBlocks(ws []*warmServer, n int, every time.Duration) [][]time.Duration {
	d := make([][]time.Duration, len(ws))
	next := time.Now()
	for done := 0; done < n; done += pacedBlock {
		for i, w := range ws {
			for k := 0; k < pacedBlock && done+k < n; k++ {
				time.Sleep(time.Until(next))
				next = next.Add(every)
				t0 := time.Now()
				w.call()
				d[i] = append(d[i], time.Since(t0))
			}
		}
	}
	return d
}

// pacedBench calls a warm stateless tool at an agent's pace with the
// default configuration, on this tree's server and, when
// FORGE_BENCH_BASELINE names another build's mcp-forge, on that build's
// too, in turns of pacedBlock calls. It reports p50 and p95 per build
// and how many calls were served warm.
func pacedBench(b *testing.B, plugin, code string) {
	type server struct {
		name string
		w    *warmServer
		d    []time.Duration
		hits int64
	}
	start := func(name, bin string) *server {
		w := &warmServer{b: b, plugin: plugin, code: code}
		if bin == "" {
			w.s = testenv.StartServer(b, "")
		} else {
			w.s = testenv.StartServerBinary(b, bin, testenv.BaseDir(b), "")
		}
		return &server{name: name, w: w}
	}
	servers := []*server{start("this", "")}
	if bin := os.Getenv("FORGE_BENCH_BASELINE"); bin != "" {
		servers = append(servers, start("baseline", bin))
	}
	for _, s := range servers {
		testenv.WaitWarm(b, s.w.s.Session, plugin, 2)
		s.w.call() // the plugin's first connection is not the steady state
	}
	for _, s := range servers {
		testenv.WaitWarm(b, s.w.s.Session, plugin, 2)
		s.hits = -s.w.pool().Hits
	}
	b.ResetTimer()
	b.StopTimer()
	ws := make([]*warmServer, len(servers))
	for i, s := range servers {
		ws[i] = s.w
	}
	for i, d := range inBlocks(ws, b.N, pace) {
		servers[i].d = d
	}
	msg := fmt.Sprintf("execute_%s %q at one call a second, default configuration, %d calls each:", plugin, code, b.N)
	for _, s := range servers {
		s.hits += s.w.pool().Hits
		p50, p95 := testenv.Percentile(s.d, 50), testenv.Percentile(s.d, 95)
		b.ReportMetric(p50, s.name+"-p50-ms")
		b.ReportMetric(p95, s.name+"-p95-ms")
		b.ReportMetric(float64(s.hits), s.name+"-warm-hits")
		msg += fmt.Sprintf(" %s p50 %.1f ms p95 %.1f ms (%d warm);", s.name, p50, p95, s.hits)
	}
	if len(servers) == 2 {
		r := testenv.Percentile(servers[0].d, 50) / testenv.Percentile(servers[1].d, 50)
		b.ReportMetric(r, "ratio-p50")
		msg += fmt.Sprintf(" ratio p50 %.3f", r)
	}
	b.Log(msg)
}

// BenchmarkStatelessPacedPython: execute_python of print(1), one call a
// second, default configuration (FORGE_BENCH_BASELINE: against another
// build in the same run).
func BenchmarkStatelessPacedPython(b *testing.B) { pacedBench(b, "python", "print(1)") }

// BenchmarkStatelessPacedR: execute_r of cat(1) likewise. Goal (issue 40):
// p50 at most aa0b963's (24.7 ms there) without a worse p95.
func BenchmarkStatelessPacedR(b *testing.B) { pacedBench(b, "r", "cat(1)") }
