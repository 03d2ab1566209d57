package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// warmReady counts the warm kernels a plugin has reported ready so far
// (plugin.kernel.warm in the audit log).
func warmReady(b *testing.B, s *testenv.Server, plugin string) int {
	f, err := os.Open(s.AuditLog)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Event   string         `json:"event"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "plugin.kernel.warm" && e.Details["plugin"] == plugin {
			n++
		}
	}
	return n
}

// BenchmarkSessionStartPython: a new Python session's first execute (`1`),
// taking a warm kernel (the pool refilled before each), and started cold (a
// request with an environment matches no warm kernel), against the raw
// start of a kernel container (create, start, connect, kernel_info) without
// MCP-Forge.
func BenchmarkSessionStartPython(b *testing.B) {
	const warmN, coldN, rawN = 10, 5, 5
	s := testenv.StartServer(b, benchConfig)
	open := func(sid string, env map[string]any) time.Duration {
		args := map[string]any{"code": "1", "session_id": sid}
		if env != nil {
			args["environment"] = env
		}
		start := time.Now()
		callArgs(b, s, "execute_python", args)
		took := time.Since(start)
		s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "destroy_session", Arguments: map[string]any{"session_id": sid}})
		return took
	}
	// The first session pays for the plugin's first connection.
	testenv.WaitFor(b, "the first warm kernel", 3*time.Minute, func() bool { return warmReady(b, s, "jupyter") >= 1 })
	open("first", nil)
	b.ResetTimer()
	var warm, cold, raw []time.Duration
	for i := range warmN {
		testenv.WaitFor(b, "the pool to refill", 3*time.Minute, func() bool { return warmReady(b, s, "jupyter") >= i+2 })
		warm = append(warm, open(fmt.Sprintf("warm%d", i), nil))
	}
	for i := range coldN {
		cold = append(cold, open(fmt.Sprintf("cold%d", i), map[string]any{"BENCH_COLD": strconv.Itoa(i)}))
	}
	for range rawN {
		start := time.Now()
		c := sdktest.StartKernel(b, "mcp-forge/python:3.11", sdktest.IPyKernel)
		if _, _, err := c.Run(context.Background(), "1", jupyter.ExecuteOptions{}); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(start))
	}
	b.StopTimer()
	wm, _ := stats(warm)
	cm, _ := stats(cold)
	rm, _ := stats(raw)
	b.ReportMetric(wm, "warm-start-median-ms")
	b.ReportMetric(cm, "cold-start-median-ms")
	b.ReportMetric(rm, "kernel-start-median-ms")
	b.Logf("new Python session: warm median %.0f ms (%d), cold median %.0f ms (%d); raw kernel container start median %.0f ms (%d)", wm, warmN, cm, coldN, rm, rawN)
}

// loadConfig allows the benchmark's 20 sessions besides the warm ones.
const loadConfig = benchConfig + "[sessions]\nmax_concurrent = 25\n"

// BenchmarkConcurrentLoad: 50 stateless runs and an execute in each of 20
// live sessions, all at once; errors and the p95 of each kind.
func BenchmarkConcurrentLoad(b *testing.B) {
	s := testenv.StartServer(b, loadConfig)
	callArgs(b, s, "execute_python", map[string]any{"code": "1", "session_id": "warmup"})
	b.ResetTimer()
	r := testenv.Load(b, s.Session, 50, 20)
	b.StopTimer()
	b.ReportMetric(float64(len(r.Errors)), "errors")
	b.ReportMetric(testenv.Percentile(r.Stateless, 95), "stateless-p95-ms")
	b.ReportMetric(testenv.Percentile(r.Session, 95), "session-p95-ms")
	b.ReportMetric(float64(r.Took.Milliseconds()), "wall-ms")
	for _, e := range r.Errors {
		b.Log(e)
	}
	b.Logf("50 stateless + 20 session executes at once: %d errors, stateless p95 %.0f ms, session p95 %.0f ms, all done in %s",
		len(r.Errors), testenv.Percentile(r.Stateless, 95), testenv.Percentile(r.Session, 95), r.Took.Round(time.Millisecond))
}

// BenchmarkIdleSessionMemory: what one idle Python session costs the host.
// The server's and plugins' share is the growth of their proportional set
// size over 10 idle sessions; the container's is its memory cgroup's usage
// as the session reads it.
func BenchmarkIdleSessionMemory(b *testing.B) {
	const n = 10
	s := testenv.StartServer(b, loadConfig)
	callArgs(b, s, "execute_python", map[string]any{"code": "1", "session_id": "warmup"})
	b.ResetTimer()
	before := testenv.PSS(s.Cmd.Process.Pid)
	var container []float64
	for i := range n {
		sid := fmt.Sprintf("idle%d", i)
		res := callArgs(b, s, "execute_python", map[string]any{"session_id": sid,
			"code": "int(open('/sys/fs/cgroup/memory/memory.usage_in_bytes').read())"})
		v, _ := strconv.ParseFloat(strings.TrimSpace(resultRepr(res)), 64)
		container = append(container, v/(1<<20))
	}
	after := testenv.PSS(s.Cmd.Process.Pid)
	b.StopTimer()
	host := float64(after-before) / n / (1 << 20)
	cm := median(container)
	b.ReportMetric(host, "host-mb-per-session")
	b.ReportMetric(cm, "container-mb-per-session")
	b.ReportMetric(float64(after)/(1<<20), "host-pss-mb")
	b.Logf("idle Python session: server + plugins %.2f MB each (PSS %.1f → %.1f MB over %d sessions); container median %.1f MB",
		host, float64(before)/(1<<20), float64(after)/(1<<20), n, cm)
}

// callArgs calls a tool and fails the benchmark on any error.
func callArgs(b *testing.B, s *testenv.Server, tool string, args map[string]any) *mcp.CallToolResult {
	res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		b.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		b.Fatalf("%s failed: %s", tool, testenv.Text(res))
	}
	return res
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func resultRepr(res *mcp.CallToolResult) string { return resultOf(res).ResultRepr }

func stdoutOf(res *mcp.CallToolResult) string { return resultOf(res).Stdout }

func resultOf(res *mcp.CallToolResult) (o struct {
	ResultRepr string `json:"result_repr"`
	Stdout     string `json:"stdout"`
}) {
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &o)
	return o
}

// BenchmarkStatelessColdPython: execute_python of print(1) with the pool off
// vs a bare `podman run --rm`, both measured in this run.
func BenchmarkStatelessColdPython(b *testing.B) {
	s := testenv.StartServer(b, benchConfig+coldConfig)
	call := func() error {
		callArgs(b, s, "execute_python", map[string]any{"code": "print(1)"})
		return nil
	}
	run := func() error {
		out, err := exec.Command("podman", "run", "--rm", "--network", "none", "mcp-forge/python:3.11", "python3", "-c", "print(1)").CombinedOutput()
		if err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		return nil
	}
	call()
	run()
	b.ResetTimer()
	// Interleaved, so that a burst of load elsewhere on the machine weighs
	// on both alike.
	var forge, base []time.Duration
	for range b.N {
		f, _ := measure(1, call)
		r, _ := measure(1, run)
		forge, base = append(forge, f...), append(base, r...)
	}
	b.StopTimer()
	fm, _ := stats(forge)
	bm, _ := stats(base)
	b.ReportMetric(fm, "forge-median-ms")
	b.ReportMetric(bm, "podman-run-median-ms")
	b.ReportMetric(fm/bm, "ratio-median")
	b.Logf("execute_python print(1) cold, %d runs: forge median %.0f ms; bare podman run --rm median %.0f ms; ratio %.2f", b.N, fm, bm, fm/bm)
}
