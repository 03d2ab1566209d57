package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// isolations are the two ways a sandbox runs, the table's two columns:
// runc (0) and gVisor (1).
var isolations = [2]string{"container", "gvisor"}

func requireRunsc(b *testing.B) {
	if _, err := os.Stat("/usr/local/lib/mcp-forge/runsc"); err != nil {
		b.Skip("runsc is not installed (make setup installs it)")
	}
}

// isoPair starts one server per isolation, both with configuration cfg
// (which must not open [security]).
func isoPair(b *testing.B, cfg string) [2]*testenv.Server {
	requireRunsc(b)
	var s [2]*testenv.Server
	for i, iso := range isolations {
		s[i] = testenv.StartServer(b, cfg+"[security]\nisolation = \""+iso+"\"\n")
	}
	return s
}

// stopPair ends a pair's servers before the benchmark does, so that what
// follows does not share the machine with their pools.
func stopPair(p [2]*testenv.Server) {
	for _, s := range p {
		s.Session.Close()
	}
}

// inTurns measures f(0) and f(1) n times each, one of each in turn, so
// that load from elsewhere on a shared machine weighs on both alike; the
// side that goes first alternates, so neither always follows the other's
// container removal.
func inTurns(n int, f func(side int) time.Duration) (d [2][]time.Duration) {
	for i := range n {
		for _, side := range [2][2]int{{0, 1}, {1, 0}}[i%2] {
			d[side] = append(d[side], f(side))
		}
	}
	return d
}

// timedCall calls a tool on s and returns how long the call took.
func timedCall(b *testing.B, s *testenv.Server, tool string, args map[string]any) time.Duration {
	t0 := time.Now()
	callArgs(b, s, tool, args)
	return time.Since(t0)
}

// syscallCode is fixed work of system calls, the kind gVisor's Sentry
// answers instead of the host: 2,000 stat calls, then 200 small files
// written, read back and removed in /tmp. importCode is `import numpy,
// pandas` in the run's fresh interpreter (a warm runner imports nothing
// by default). Each prints the seconds its work took, timed inside the
// sandbox: the call's own cost (tens of ms) stays out of the ratio.
const (
	syscallCode = `import os, time
t = time.perf_counter()
for _ in range(2000):
    os.stat("/etc/passwd")
for i in range(200):
    p = "/tmp/f%d" % i
    with open(p, "w") as f:
        f.write("x" * 512)
    with open(p) as f:
        f.read()
    os.remove(p)
print(time.perf_counter() - t)
`
	importCode = "import time\nt = time.perf_counter()\nimport numpy, pandas\nprint(time.perf_counter() - t)\n"
)

// work runs code (which prints the seconds its work took, last) as a
// stateless Python run on each server of a pair n times, in turns, each
// on a warm runner with both pools full (untimed), so that no refill
// competes with it; it returns the work's times and the calls'.
func work(b *testing.B, p [2]*testenv.Server, code string, n int) (inside, calls [2][]time.Duration) {
	calls = inTurns(n, func(side int) time.Duration {
		for _, s := range p {
			full(b, s, "python")
		}
		t0 := time.Now()
		res := callArgs(b, p[side], "execute_python", map[string]any{"code": code})
		took := time.Since(t0)
		out := strings.Fields(stdoutOf(res))
		if len(out) == 0 {
			b.Fatalf("%q printed nothing", code)
		}
		sec, err := strconv.ParseFloat(out[len(out)-1], 64)
		if err != nil {
			b.Fatalf("%q printed %q, not its time: %v", code, stdoutOf(res), err)
		}
		inside[side] = append(inside[side], time.Duration(sec*float64(time.Second)))
		return took
	})
	return inside, calls
}

// pooledMemory is the median host memory of the idle pooled sandboxes of
// server s (its memory cgroup: sandboxMemory), in MB, by plugin.
func pooledMemory(b *testing.B, s *testenv.Server) map[string]float64 {
	by := map[string][]float64{}
	for _, c := range testenv.Sandboxes(b, map[string]string{runtime.LabelInstance: forge.Instance(s.Base)}) {
		if v, ok := sandboxMemory(b, c.ID); ok {
			by[c.Labels[runtime.LabelPlugin]] = append(by[c.Labels[runtime.LabelPlugin]], v/(1<<20))
		}
	}
	med := map[string]float64{}
	for p, v := range by {
		med[p] = median(v)
	}
	return med
}

// isoFigure is one row of the isolation table: a figure under runc and
// under gVisor, measured in the same run, and its goal.
type isoFigure struct {
	name, metric, unit string
	runc, gvisor       float64
	goal               string
	met                func(runc, gvisor float64) bool // nil: reported only
}

func ratioAtMost(x float64) func(r, g float64) bool {
	return func(r, g float64) bool { return r > 0 && g/r <= x }
}

func gvisorAtMost(x float64) func(r, g float64) bool {
	return func(_, g float64) bool { return g <= x }
}

// report gives each figure as metrics (<metric>-runc-<unit>,
// <metric>-gvisor-<unit>, <metric>-ratio) and the whole as one table on
// stdout.
func report(b *testing.B, title string, figs []isoFigure) {
	title = b.Name() + ": " + title
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n%-48s %10s %10s %7s  %-22s %s\n", title, "figure", "runc", "gVisor", "ratio", "goal", "")
	for _, f := range figs {
		unit := strings.ToLower(f.unit)
		b.ReportMetric(f.runc, f.metric+"-runc-"+unit)
		b.ReportMetric(f.gvisor, f.metric+"-gvisor-"+unit)
		ratio := 0.0
		if f.runc > 0 {
			ratio = f.gvisor / f.runc
			b.ReportMetric(ratio, f.metric+"-ratio")
		}
		verdict := "reported"
		if f.met != nil {
			verdict = "NOT MET"
			if f.met(f.runc, f.gvisor) {
				verdict = "met"
			}
		}
		fmt.Fprintf(&sb, "%-48s %7.1f %-2s %7.1f %-2s %6.2f×  %-22s %s\n", f.name, f.runc, f.unit, f.gvisor, f.unit, ratio, f.goal, verdict)
	}
	// Printed, not logged: a benchmark's log is cut at ten lines.
	fmt.Print(sb.String())
}

// BenchmarkIsolationTable is the isolation column of `make bench`: each
// figure under runc and under gVisor, two servers started in this run
// with the default configuration (half a core per sandbox, the default
// pools), measured in turns so that the machine's load weighs on both
// alike, with the gVisor goals. b.N is the number of calls of each kind
// (paced and back to back, Python and R); cold starts, imports and the
// syscall-heavy script b.N/2, session executes 5×b.N.
func BenchmarkIsolationTable(b *testing.B) {
	n := b.N
	few := max(n/2, 1)
	ms := func(d []time.Duration) float64 { return testenv.Percentile(d, 50) }

	// Cold: the stateless pools off, so every run starts its sandbox.
	cold := isoPair(b, coldConfig+testenv.NoSessionPools)
	for _, s := range cold {
		callArgs(b, s, "execute_python", map[string]any{"code": "print(1)"}) // the plugin's first connection
	}
	b.ResetTimer()
	coldD := inTurns(few, func(side int) time.Duration {
		return timedCall(b, cold[side], "execute_python", map[string]any{"code": "print(1)"})
	})
	stopPair(cold)

	p := isoPair(b, "")
	var ws [2][2]*warmServer // [language][side]
	for side, s := range p {
		full(b, s, "python", "r", "jupyter", "irkernel")
		for li, lp := range loadPlugins {
			ws[li][side] = &warmServer{b: b, s: s, plugin: lp.plugin, code: lp.code}
		}
	}
	// Idle, before any call: what each pooled sandbox holds on the host.
	time.Sleep(2 * time.Second)
	mem := [2]map[string]float64{pooledMemory(b, p[0]), pooledMemory(b, p[1])}
	for side := range p {
		for li := range loadPlugins {
			ws[li][side].call() // the plugin's first connection is not the steady state
		}
		callArgs(b, p[side], "execute_python", map[string]any{"code": "1", "session_id": "iso"})
	}
	for _, s := range p {
		full(b, s, "python", "r")
	}
	// Paced: one call a second, the four servers' calls in blocks.
	four := []*warmServer{ws[0][0], ws[0][1], ws[1][0], ws[1][1]}
	var hits [4]int64 // how many paced calls were served warm: a miss is a cold start
	for i, w := range four {
		hits[i] = -w.pool().Hits
	}
	paced := inBlocks(four, n, pace)
	for i, w := range four {
		hits[i] += w.pool().Hits
	}
	for _, s := range p {
		full(b, s, "python", "r")
	}
	// Back to back: each call as soon as the last answered, the refills
	// of a block's calls competing with them as they do for an agent.
	b2b := inBlocks(four, n, 0)
	session := inTurns(5*n, func(side int) time.Duration {
		return timedCall(b, p[side], "execute_python", map[string]any{"code": "y = 1", "session_id": "iso"})
	})
	imports, importCalls := work(b, p, importCode, few)
	syscalls, syscallCalls := work(b, p, syscallCode, few)
	b.StopTimer()

	figs := []isoFigure{
		{name: "cold start, Python print(1) (pool off)", metric: "cold", unit: "ms", runc: ms(coldD[0]), gvisor: ms(coldD[1]), goal: "≤ 1.5× runc", met: ratioAtMost(1.5)},
	}
	for li, lp := range loadPlugins {
		goal := []float64{15, 20}[li]
		figs = append(figs,
			isoFigure{name: "warm " + lp.plugin + " " + lp.code + ", one call a second, p50", metric: "paced-" + lp.plugin + "-p50", unit: "ms",
				runc: ms(paced[2*li]), gvisor: ms(paced[2*li+1]), goal: "reported"},
			isoFigure{name: "warm " + lp.plugin + " " + lp.code + ", one call a second, p95", metric: "paced-" + lp.plugin + "-p95", unit: "ms",
				runc: testenv.Percentile(paced[2*li], 95), gvisor: testenv.Percentile(paced[2*li+1], 95), goal: fmt.Sprintf("gVisor ≤ %.0f ms", goal), met: gvisorAtMost(goal)},
			isoFigure{name: "  paced calls served warm", metric: "paced-" + lp.plugin + "-warm", unit: "n",
				runc: float64(hits[2*li]), gvisor: float64(hits[2*li+1]), goal: "reported"},
			isoFigure{name: "warm " + lp.plugin + " " + lp.code + ", back to back, p50", metric: "b2b-" + lp.plugin + "-p50", unit: "ms",
				runc: ms(b2b[2*li]), gvisor: ms(b2b[2*li+1]), goal: "reported"})
	}
	figs = append(figs,
		isoFigure{name: "session execute y = 1", metric: "session", unit: "ms", runc: ms(session[0]), gvisor: ms(session[1]),
			goal: "≤ 2 ms over runc", met: func(r, g float64) bool { return g-r <= 2 }},
		isoFigure{name: "import numpy, pandas (in the run)", metric: "import", unit: "ms", runc: ms(imports[0]), gvisor: ms(imports[1]),
			goal: "≤ 1.5× runc", met: ratioAtMost(1.5)},
		isoFigure{name: "  the whole call", metric: "import-call", unit: "ms", runc: ms(importCalls[0]), gvisor: ms(importCalls[1]), goal: "reported"},
		isoFigure{name: "2,000 stat + 200 small files in /tmp", metric: "syscalls", unit: "ms", runc: ms(syscalls[0]), gvisor: ms(syscalls[1]),
			goal: "≤ 3× runc", met: ratioAtMost(3)},
		isoFigure{name: "  the whole call", metric: "syscalls-call", unit: "ms", runc: ms(syscallCalls[0]), gvisor: ms(syscallCalls[1]), goal: "reported"},
	)
	for _, plugin := range []string{"python", "r", "jupyter", "irkernel"} {
		figs = append(figs, isoFigure{name: "idle pooled sandbox, " + plugin + " (host cgroup)", metric: "idle-" + plugin, unit: "MB",
			runc: mem[0][plugin], gvisor: mem[1][plugin], goal: "gVisor ≤ 60 MB", met: gvisorAtMost(60)})
	}
	report(b, fmt.Sprintf("runc vs gVisor, default configuration, in turns (%d paced and back-to-back calls, %d cold, imports and syscall runs, %d session executes each):", n, few, 5*n), figs)
}

// quotaConfig is a server whose sandboxes get quota µs of CPU per 100 ms
// and whose only pool is the Python runners'.
func quotaConfig(quota int) string {
	return fmt.Sprintf("[execution]\ndefault_cpu_quota = %d\nmax_cpu_quota = %d\n[plugins.r.config]\nwarm = 0\n", quota, max(quota, 100000)) + testenv.NoSessionPools
}

// BenchmarkIsolationCPUQuota: how a sandbox's CPU quota weighs on gVisor
// against runc. Under systrap each of the code's system calls wakes a
// Sentry thread and a stub thread, all in the sandbox's cgroup, so the
// quota throttles the Sentry's work for the code as well as the code. The
// syscall-heavy script and `import numpy, pandas`, b.N runs each (timed
// inside), a warm `print(0)` 2×b.N times and a session's `y = 1` 5×b.N
// times (the calls), under
// runc and gVisor at half a core, one, two and ten cores (more than this
// host has: no quota in effect), a pair of servers per quota.
func BenchmarkIsolationCPUQuota(b *testing.B) {
	quotas := []int{50000, 100000, 200000, 1000000}
	var figs []isoFigure
	b.ResetTimer()
	for _, q := range quotas {
		b.StopTimer()
		p := isoPair(b, quotaConfig(q))
		for _, s := range p {
			callArgs(b, s, "execute_python", map[string]any{"code": "1"})
			callArgs(b, s, "execute_python", map[string]any{"code": "1", "session_id": "q"})
		}
		b.StartTimer()
		sys, _ := work(b, p, syscallCode, b.N)
		imp, _ := work(b, p, importCode, b.N)
		_, warm := work(b, p, "print(0)", 2*b.N) // no work: the call's time is the figure
		session := inTurns(5*b.N, func(side int) time.Duration {
			return timedCall(b, p[side], "execute_python", map[string]any{"code": "y = 1", "session_id": "q"})
		})
		b.StopTimer()
		stopPair(p)
		cores := fmt.Sprintf("%gcpu", float64(q)/100000)
		ms := func(d []time.Duration) float64 { return testenv.Percentile(d, 50) }
		figs = append(figs,
			isoFigure{name: "syscall-heavy, quota " + cores, metric: "syscalls-" + cores, unit: "ms", runc: ms(sys[0]), gvisor: ms(sys[1]), goal: "reported"},
			isoFigure{name: "import numpy, pandas, quota " + cores, metric: "import-" + cores, unit: "ms", runc: ms(imp[0]), gvisor: ms(imp[1]), goal: "reported"},
			isoFigure{name: "warm print(1) call, quota " + cores, metric: "warm-" + cores, unit: "ms", runc: ms(warm[0]), gvisor: ms(warm[1]), goal: "reported"},
			isoFigure{name: "session execute y = 1, quota " + cores, metric: "session-" + cores, unit: "ms", runc: ms(session[0]), gvisor: ms(session[1]), goal: "reported"})
	}
	report(b, fmt.Sprintf("runc vs gVisor by CPU quota (10cpu: none in effect on this host), medians of %d script runs (timed inside), %d warm calls and %d session executes each:", b.N, 2*b.N, 5*b.N), figs)
}

// pidsCode starts as many processes as it can (each a cat waiting for the
// end of a pipe: a small process, where forked Pythons would reach the
// memory limit first), then as many threads, releasing each kind before the next; it prints
// both counts, and the tasks the sandbox's /proc shows before it starts
// any (its runner's, and whatever else runs there).
const pidsCode = `import os, threading
def procs():
    r, w = os.pipe()
    kids = []
    try:
        while len(kids) < 4096:
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(r, 0)
                    os.close(w)
                    os.execv("/bin/cat", ["cat"])
                finally:
                    os._exit(1)
            kids.append(pid)
    except OSError:
        pass
    os.close(w)
    for k in kids:
        os.waitpid(k, 0)
    os.close(r)
    return len(kids)
def threads():
    ev = threading.Event()
    ts = []
    try:
        while len(ts) < 4096:
            t = threading.Thread(target=ev.wait)
            t.start()
            ts.append(t)
    except RuntimeError:
        pass
    ev.set()
    for t in ts:
        t.join()
    return len(ts)
def tasks():
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/status" % d) as f:
                    n += int([l.split()[1] for l in f if l.startswith("Threads:")][0])
            except (OSError, IndexError):
                pass
    return n
print(procs(), threads(), tasks())
`

// BenchmarkIsolationPids: what the code of a sandbox gets of its pids
// limit under runc and under gVisor, whose Sentry's threads count in the
// same cgroup (gvisorPids raises the cgroup's limit for them; the Sentry
// holds the code to the configured count itself): the processes, then
// the threads, a stateless Python run starts, at the default limit (128)
// and at 512.
func BenchmarkIsolationPids(b *testing.B) {
	var figs []isoFigure
	for _, pids := range []int{128, 512} {
		p := isoPair(b, fmt.Sprintf("[execution]\ndefault_pids = %d\nmax_pids = %d\n[plugins.r.config]\nwarm = 0\n", pids, max(pids, 1024))+testenv.NoSessionPools)
		var got [2][3]float64 // [side][processes, threads, tasks before]
		for side, s := range p {
			for range b.N {
				out := stdoutOf(callArgs(b, s, "execute_python", map[string]any{"code": pidsCode}))
				if _, err := fmt.Sscan(out, &got[side][0], &got[side][1], &got[side][2]); err != nil {
					b.Fatalf("the pids probe printed %q, not its counts: %v", out, err)
				}
			}
		}
		stopPair(p)
		figs = append(figs,
			isoFigure{name: fmt.Sprintf("processes started, pids %d", pids), metric: fmt.Sprintf("procs-%d", pids), unit: "n", runc: got[0][0], gvisor: got[1][0],
				goal: "as many as runc", met: func(r, g float64) bool { return g >= r }},
			isoFigure{name: fmt.Sprintf("threads started, pids %d", pids), metric: fmt.Sprintf("threads-%d", pids), unit: "n", runc: got[0][1], gvisor: got[1][1],
				goal: "as many as runc", met: func(r, g float64) bool { return g >= r }},
			isoFigure{name: fmt.Sprintf("tasks in the sandbox before, pids %d", pids), metric: fmt.Sprintf("tasks-%d", pids), unit: "n", runc: got[0][2], gvisor: got[1][2], goal: "reported"})
	}
	report(b, "what the code gets of its pids limit (the last of b.N runs):", figs)
}
