package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// runtimeFigures are one runtime's column of the Kubernetes table.
type runtimeFigures struct {
	warm, warmP90, cold, session, sessionP90, raw, startWarm, startCold, concurrentWall, concurrentP95 float64
	// where a cold run's time goes: the sandbox created and started (a
	// pod's cold start), then its runner's start
	coldStart, coldReady float64
}

// rawRoundTrip is a kernel round trip measured inside its sandbox:
// jupyter_client's execute of y = 1, n times, against the session's own
// kernel (its connection file), the median in ms on the last line.
const rawRoundTrip = `import statistics, sys, time
from jupyter_client import BlockingKernelClient
c = BlockingKernelClient(connection_file=sys.argv[1])
c.load_connection_file()
c.start_channels()
c.wait_for_ready(timeout=30)
d = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    c.execute_interactive("y = 1", timeout=30, output_hook=lambda m: None)
    d.append(time.perf_counter() - t)
c.stop_channels()
print(statistics.median(d) * 1000)
`

// rawKernel measures rawRoundTrip in session id's sandbox, which the
// session's own code names (its hostname: a pod's name, a container's
// short id) with its kernel's connection file.
func rawKernel(b *testing.B, kube bool, s *testenv.Server, id string, n int) float64 {
	res := callArgs(b, s, "execute_python", map[string]any{"session_id": id,
		"code": "import socket\nfrom ipykernel.connect import get_connection_file\nprint(socket.gethostname(), get_connection_file())"})
	where := strings.Fields(stdoutOf(res))
	if len(where) != 2 {
		b.Fatalf("the session did not name its sandbox and connection file: %q", stdoutOf(res))
	}
	out := testenv.SandboxExec(b, kube, where[0], "python3", "-c", rawRoundTrip, where[1], strconv.Itoa(n))
	lines := strings.Fields(string(out.Stdout))
	if out.ExitCode != 0 || len(lines) == 0 {
		b.Fatalf("the raw round trip in %s: exit %d\n%s\n%s", where[0], out.ExitCode, out.Stdout, out.Stderr)
	}
	ms, err := strconv.ParseFloat(lines[len(lines)-1], 64)
	if err != nil {
		b.Fatalf("the raw round trip in %s: %v", where[0], err)
	}
	return ms
}

// measureRuntime takes the table's figures on one runtime: a warm and a
// cold stateless run, a session execute, a new session from the warm pool
// and cold, and 20 stateless runs at once.
func measureRuntime(b *testing.B, kube bool, n int) runtimeFigures {
	var f runtimeFigures
	s := testenv.StartServerOn(b, kube, benchConfig+"[plugins.python.config]\nwarm = 2\n")
	call := func(args map[string]any) func() error {
		return func() error { callArgs(b, s, "execute_python", args); return nil }
	}
	print1 := map[string]any{"code": "print(1)"}
	call(print1)() // plugin, image and first connection
	testenv.WaitFor(b, "the warm pools", 3*time.Minute, func() bool { return warmReady(b, s, "jupyter") >= 1 })
	// At an agent's pace (calls seconds apart): the pool is full again
	// before each call, which takes a warm sandbox from it, the claim.
	var warm []time.Duration
	for range n {
		testenv.WaitWarm(b, s.Session, "python", 2)
		d, _ := measure(1, call(print1))
		warm = append(warm, d...)
	}
	f.warm, f.warmP90 = stats(warm)
	call(map[string]any{"code": "y = 0", "session_id": "bench"})()
	d, _ := measure(n, call(map[string]any{"code": "y = 1", "session_id": "bench"}))
	f.session, f.sessionP90 = stats(d)
	f.raw = rawKernel(b, kube, s, "bench", 2*n)
	var starts []time.Duration
	for i := range 5 {
		testenv.WaitFor(b, "the session pool to refill", 3*time.Minute, func() bool { return warmReady(b, s, "jupyter") >= i+2 })
		d, _ := measure(1, call(map[string]any{"code": "1", "session_id": fmt.Sprintf("new%d", i)}))
		starts = append(starts, d...)
	}
	f.startWarm, _ = stats(starts)
	starts = nil
	for i := range 3 { // an environment matches no warm kernel: started for the request
		d, _ := measure(1, call(map[string]any{"code": "1", "session_id": fmt.Sprintf("cold%d", i), "environment": map[string]any{"BENCH_COLD": fmt.Sprint(i)}}))
		starts = append(starts, d...)
	}
	f.startCold, _ = stats(starts)
	var mu sync.Mutex
	var each []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: print1})
			if err != nil || res.IsError {
				b.Errorf("a concurrent run failed: %v %s", err, testenv.Text(res))
			}
			mu.Lock()
			each = append(each, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	f.concurrentWall = float64(time.Since(start).Microseconds()) / 1000
	f.concurrentP95 = testenv.Percentile(each, 95)

	cs := testenv.StartServerOn(b, kube, benchConfig+coldConfig)
	cold := func() error { callArgs(b, cs, "execute_python", print1); return nil }
	cold()
	d, _ = measure(max(n/4, 3), cold)
	f.cold, _ = stats(d)
	ph := readColdPhases(b, cs.AuditLog)
	f.coldStart, f.coldReady = ph.create+ph.start, ph.ready
	return f
}

// BenchmarkKubernetesTable: issue 23's table, the Kubernetes column beside
// the Podman one, both measured in this run on this machine (the
// Kubernetes cluster of `make kube-up`). Goals: warm stateless run ≤ 2× the
// Podman warm figure, the warm-pool claim (a warm run) ≤ 300 ms p50.
func BenchmarkKubernetesTable(b *testing.B) {
	if !testenv.Kube() {
		b.Skip("needs " + testenv.KubeConfigEnv + ": `make bench-kube` brings the cluster up")
	}
	n := max(b.N, 10)
	b.ResetTimer()
	p := measureRuntime(b, false, n)
	k := measureRuntime(b, true, n)
	b.StopTimer()
	for _, m := range []struct {
		name       string
		kube, podm float64
	}{
		{"warm-run", k.warm, p.warm}, {"warm-run-p90", k.warmP90, p.warmP90}, {"cold-run", k.cold, p.cold},
		{"cold-sandbox-start", k.coldStart, p.coldStart}, {"cold-runner-ready", k.coldReady, p.coldReady},
		{"session-execute", k.session, p.session}, {"session-execute-p90", k.sessionP90, p.sessionP90},
		{"raw-kernel-in-sandbox", k.raw, p.raw}, {"session-over-raw", k.session - k.raw, p.session - p.raw},
		{"new-session-warm", k.startWarm, p.startWarm}, {"new-session-cold", k.startCold, p.startCold},
		{"20-concurrent-wall", k.concurrentWall, p.concurrentWall}, {"20-concurrent-p95", k.concurrentP95, p.concurrentP95},
	} {
		b.ReportMetric(m.kube, "kube-"+m.name+"-ms")
		b.ReportMetric(m.podm, "podman-"+m.name+"-ms")
		b.Logf("%-20s kubernetes %8.1f ms   podman %8.1f ms   ratio %.2f", m.name, m.kube, m.podm, m.kube/m.podm)
	}
	b.ReportMetric(k.warm/p.warm, "ratio-warm-run")
}
