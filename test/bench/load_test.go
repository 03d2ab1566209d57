package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// loadPlugins are the stateless plugins issue 26 measures: the code of a
// call, and the bare `podman run` it is compared with.
var loadPlugins = []struct {
	plugin, code string
	bare         []string
}{
	{"python", "print(1)", []string{"mcp-forge/python:3.11", "python3", "-c", "print(1)"}},
	{"r", "cat(1)", []string{"mcp-forge/r:4.2", "Rscript", "-e", "cat(1)"}},
}

// BenchmarkUnderLoad is issue 26's table: stateless calls back to back, in
// bursts of 8 and paced at one a second, with the user's default
// configuration (half a core per run, the pools at their default sizes)
// and with the bench's lifted quota; beside them a bare `podman run`
// back to back in the same run, and the idle memory of the pools. b.N is
// the number of calls of each kind (-benchtime 50x: ≥ 50).
func BenchmarkUnderLoad(b *testing.B) {
	for _, c := range []struct{ name, cfg string }{{"default", ""}, {"lifted", benchConfig}} {
		b.Run(c.name, func(b *testing.B) {
			s := testenv.StartServer(b, c.cfg)
			for _, p := range []string{"python", "r", "jupyter", "irkernel"} {
				testenv.WaitWarm(b, s.Session, p, 1)
			}
			full(b, s, "python", "r", "jupyter", "irkernel")
			if c.name == "default" {
				b.Run("idle", func(b *testing.B) {
					pools, n := poolMemory(b)
					pss := float64(testenv.PSS(s.Cmd.Process.Pid)) / (1 << 20)
					b.ReportMetric(pss, "server-pss-mb")
					b.Logf("idle: %d pooled containers hold %.1f MB; server + plugins PSS %.1f MB", n, pools, pss)
				})
			}
			for _, lp := range loadPlugins {
				b.Run(lp.plugin, func(b *testing.B) { underLoad(b, s, lp.plugin, lp.code, lp.bare) })
			}
		})
	}
}

// full waits until the pools of plugins hold what they aim for.
func full(b *testing.B, s *testenv.Server, plugins ...string) {
	for _, p := range plugins {
		testenv.WaitFor(b, p+"'s pool to be full", 2*time.Minute, func() bool {
			wp := testenv.Pool(b, s.Session, p)
			return wp != nil && wp.Warm >= wp.Size && wp.Starting == 0
		})
	}
}

func underLoad(b *testing.B, s *testenv.Server, plugin, code string, bare []string) {
	n := b.N
	call := func() time.Duration {
		t0 := time.Now()
		res, err := s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_" + plugin, Arguments: map[string]any{"code": code}})
		if err != nil || res.IsError {
			b.Fatalf("execute_%s: %v %s", plugin, err, testenv.Text(res))
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	// Back to back: each call as soon as the last one answered.
	full(b, s, plugin)
	t0 := time.Now()
	b2b := make([]time.Duration, n)
	for i := range b2b {
		b2b[i] = call()
	}
	rate := float64(n) / time.Since(t0).Seconds()
	// Bursts of 8 at once; the first grows the pool, the second is measured.
	var burst []time.Duration
	for round := 0; round < 2; round++ {
		full(b, s, plugin)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := call()
				mu.Lock()
				burst = append(burst, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if round == 0 {
			burst = burst[:0]
		}
	}
	// Paced: one call a second, an agent's pace.
	full(b, s, plugin)
	paced := make([]time.Duration, 0, n)
	for range n {
		next := time.Now().Add(time.Second)
		paced = append(paced, call())
		time.Sleep(time.Until(next))
	}
	// A bare podman run back to back, the same number of times.
	t0 = time.Now()
	for range n {
		if out, err := exec.Command("podman", append([]string{"run", "--rm", "--network", "none"}, bare...)...).CombinedOutput(); err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
	}
	bareRate := float64(n) / time.Since(t0).Seconds()
	b.StopTimer()
	p := testenv.Pool(b, s.Session, plugin)
	ms := testenv.Percentile
	b.ReportMetric(ms(b2b, 50), "b2b-p50-ms")
	b.ReportMetric(ms(b2b, 95), "b2b-p95-ms")
	b.ReportMetric(ms(burst, 50), "burst8-p50-ms")
	b.ReportMetric(ms(paced, 95), "paced-p95-ms")
	b.ReportMetric(rate, "runs-per-s")
	b.ReportMetric(bareRate, "podman-runs-per-s")
	b.ReportMetric(rate/bareRate, "throughput-ratio")
	b.Logf("execute_%s %q, %d calls each: back to back p50 %.1f ms p95 %.1f ms, %.1f runs/s (bare podman run %.1f runs/s, %.2f×); burst of 8 p50 %.1f ms; paced p95 %.1f ms; pool %+v",
		plugin, code, n, ms(b2b, 50), ms(b2b, 95), rate, bareRate, rate/bareRate, ms(burst, 50), ms(paced, 95), *p)
}

// poolMemory is what the server's containers hold, all of them idle and
// pooled: the sum of their memory cgroups' usage, in MB.
func poolMemory(b *testing.B) (float64, int) {
	out, err := exec.Command("podman", "ps", "-q", "--no-trunc", "--filter", "label=io.mcp-forge.managed=true").Output()
	if err != nil {
		b.Fatalf("podman ps: %v", err)
	}
	ids := strings.Fields(string(out))
	var total float64
	for _, id := range ids {
		v, ok := sandboxMemory(b, id)
		if ok {
			total += v
		}
	}
	mb := total / (1 << 20)
	b.ReportMetric(mb, "pools-idle-mb")
	b.ReportMetric(float64(len(ids)), "pooled-containers")
	return mb, len(ids)
}

// sandboxMemory is the usage of container id's memory cgroup on the host,
// in bytes: under gVisor, the whole sandbox's (Sentry, gofer, stubs and
// the memory they hold for the code), what the host pays for it; false if
// the container is gone.
func sandboxMemory(b *testing.B, id string) (float64, bool) {
	cg, err := exec.Command("podman", "inspect", "--format", "{{.State.CgroupPath}}", id).Output()
	if err != nil {
		return 0, false // removed meanwhile
	}
	path := strings.TrimSpace(string(cg))
	var raw []byte
	for _, f := range []string{filepath.Join("/sys/fs/cgroup/memory", path, "memory.usage_in_bytes"), filepath.Join("/sys/fs/cgroup", path, "memory.current")} {
		if raw, err = os.ReadFile(f); err == nil {
			break
		}
	}
	if err != nil {
		b.Fatalf("memory of container %s: %v", id, err)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		b.Fatalf("memory of container %s: %q: %v", id, raw, err)
	}
	return v, true
}
