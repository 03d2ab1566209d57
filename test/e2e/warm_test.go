package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/hostsvc"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// coldConfig turns the warm pools of the stateless plugins off.
const coldConfig = "[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n"

// warmCall runs one call that must be served by a warm container: it waits
// for the pool, and checks the hit count moved.
func warmCall(t *testing.T, s *testenv.Server, plugin string, args map[string]any, o *out) *mcp.CallToolResult {
	t.Helper()
	before := testenv.WaitWarm(t, s.Session, plugin, 1)
	res := s.Call(t, "execute_"+plugin, args, o)
	after := testenv.Pool(t, s.Session, plugin)
	if after == nil || after.Hits != before.Hits+1 {
		t.Fatalf("the call was not served warm: pool before %+v, after %+v", before, after)
	}
	return res
}

// Timeouts, OOM, syntax and runtime errors with lines, images and output
// caps come back the same from a warm container as from a cold one.
func TestWarmRunsBehaveAsCold(t *testing.T) {
	testenv.Require(t) // the subtests skip without it, and the final checks would then fail on nothing
	type tc struct {
		name, plugin, code string
		timeout            int
		check              func(o out, res *mcp.CallToolResult) string
	}
	cases := []tc{
		{"python print", "python", "print('hello')\n6 * 7", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %q %q", o.Success, o.Stdout, o.Result)
		}},
		{"python syntax error", "python", "x = 1\ny = (\nz = 3", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %s line %d", o.Success, o.Error.Type, o.Error.Line)
		}},
		{"python runtime error", "python", "def f():\n    return 1/0\n\nf()", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%s line %d %q stderr-has-traceback=%v", o.Error.Type, o.Error.Line, o.Error.Message, strings.Contains(o.Stderr, "ZeroDivisionError"))
		}},
		{"python timeout", "python", "import time\nprint('before', flush=True)\ntime.sleep(60)", 2, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%s %q", o.Error.Type, o.Error.Message)
		}},
		{"python oom", "python", "x = bytearray(900 * 1024 * 1024)\nx[::4096] = b'x' * len(x[::4096])\nprint('survived')", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%s %q", o.Error.Type, o.Error.Message)
		}},
		{"python exit code", "python", "import os\nprint('bye', flush=True)\nos._exit(3)", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %d %s %q", o.Success, o.ExitCode, o.Error.Type, o.Stdout)
		}},
		{"python output cap and subprocess", "python", "import subprocess\nsubprocess.run(['sh', '-c', 'head -c 3000000 /dev/zero | tr \"\\\\0\" x'])\nprint('tail')", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %d %d %v", o.Success, len(o.Stdout), o.StdoutBytes, o.Truncated)
		}},
		{"python image", "python", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])", 0, func(o out, res *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %d", o.Success, pngCount(res))
		}},
		{"r print and value", "r", "cat('to stdout\\n')\nmessage('to stderr')\nx <- 41\nx + 1", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %q %q %q", o.Success, o.Stdout, o.Stderr, o.Result)
		}},
		{"r syntax error", "r", "x <- 1\ny <- (2\nz <- 3", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%s line %d", o.Error.Type, o.Error.Line)
		}},
		{"r runtime error", "r", "f <- function(v) {\n  stop('bad input: ', v)\n}\nf(1)", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("line %d %q", o.Error.Line, o.Error.Message)
		}},
		{"r timeout", "r", "Sys.sleep(60)", 2, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%s %q", o.Error.Type, o.Error.Message)
		}},
		{"r system output", "r", "invisible(system('echo from a child'))\ncat('and R\\n')", 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %q", o.Success, o.Stdout)
		}},
		{"r plot", "r", "plot(1:10)", 0, func(o out, res *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %d", o.Success, pngCount(res))
		}},
		// A warm container warms up beyond its CPU limit; the code sees only
		// the limit (cgroup v1 here, v2 elsewhere).
		{"python cpu quota", "python", cpuQuotaPython, 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %s", o.Success, o.Result)
		}},
		{"r cpu quota", "r", cpuQuotaR, 0, func(o out, _ *mcp.CallToolResult) string {
			return fmt.Sprintf("%v %s", o.Success, o.Result)
		}},
	}
	got := map[string]map[string]string{}
	for _, mode := range []string{"cold", "warm"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testenv.DefaultPools
			if mode == "cold" {
				cfg = coldConfig
			}
			s := testenv.StartServer(t, cfg)
			if mode == "warm" {
				t.Cleanup(func() { checkWarmUpClamped(t, s.AuditLog) })
			}
			got[mode] = map[string]string{}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					args := map[string]any{"code": c.code}
					if c.timeout > 0 {
						args["timeout"] = c.timeout
					}
					var o out
					var res *mcp.CallToolResult
					if mode == "warm" {
						res = warmCall(t, s, c.plugin, args, &o)
					} else {
						res = s.Call(t, "execute_"+c.plugin, args, &o)
					}
					if o.Error == nil {
						o.Error = &mcpserver.ErrorInfo{}
					}
					got[mode][c.name] = c.check(o, res)
					t.Logf("%s: %s", mode, got[mode][c.name])
				})
			}
		})
	}
	for _, c := range cases {
		if got["cold"][c.name] != got["warm"][c.name] {
			t.Errorf("%s: cold %s, warm %s", c.name, got["cold"][c.name], got["warm"][c.name])
		}
	}
	// What each case must be, whichever the mode.
	for name, want := range map[string]string{
		"python print":                     `true "hello\n" "42"`,
		"python syntax error":              "false SyntaxError line 2",
		"python timeout":                   `Timeout "execution timed out after 2s`,
		"python oom":                       "OutOfMemory",
		"python exit code":                 `false 3 ProcessExit "bye\n"`,
		"python image":                     "true 1",
		"r syntax error":                   "SyntaxError line 3",
		"r runtime error":                  `line 2 "bad input: 1"`,
		"r timeout":                        "Timeout",
		"r system output":                  `true "from a child\nand R\n"`,
		"r plot":                           "true 1",
		"r print and value":                `true "to stdout\n" "to stderr\n" "42"`,
		"python runtime error":             `ZeroDivisionError line 2 "division by zero" stderr-has-traceback=true`,
		"python output cap and subprocess": "true",
		"python cpu quota":                 `true "50000"`,
		"r cpu quota":                      `true "50000"`,
	} {
		if g := got["warm"][name]; !strings.HasPrefix(g, want) {
			t.Errorf("%s: got %s, want %s...", name, g, want)
		}
	}
}

const cpuQuotaPython = `import os
p = '/sys/fs/cgroup/cpu.max'
open(p).read().split()[0] if os.path.exists(p) else open('/sys/fs/cgroup/cpu/cpu.cfs_quota_us').read().strip()`

const cpuQuotaR = `p <- '/sys/fs/cgroup/cpu.max'
if (file.exists(p)) strsplit(readLines(p), ' ')[[1]][1] else readLines('/sys/fs/cgroup/cpu/cpu.cfs_quota_us')`

// checkWarmUpClamped: warm containers were created with an allowance above
// their CPU limit (on Podman, on a host of more than one core) and each that served a
// run was clamped to the limit, by its plugin, before it was given the
// code (one still starting when the server stopped never was).
func checkWarmUpClamped(t *testing.T, auditLog string) {
	t.Helper()
	allowed, clamped := map[string]bool{}, map[string]bool{}
	served := 0
	for _, e := range auditEntries(t, auditLog) {
		id, _ := e.Details["container_id"].(string)
		switch {
		case e.Event == hostsvc.EventWarmRun:
			if allowed[id] {
				served++
			}
			if allowed[id] && !clamped[id] {
				t.Errorf("warm container %s was given a run's code before its plugin clamped it", id)
			}
		case e.Event == audit.ContainerCreate && e.Details["warm_up_cpu_quota"] != nil:
			if q, _ := e.Details["warm_up_cpu_quota"].(float64); q <= e.Details["cpu_quota"].(float64) {
				t.Errorf("warm-up allowance %v not above the limit %v", q, e.Details["cpu_quota"])
			}
			allowed[id] = true
		case e.Event == audit.ContainerClamp && e.Success && e.Details["reason"] == nil:
			clamped[id] = true
		}
	}
	// On Kubernetes a pod's quota stays as created, and gVisor's Sentry
	// would show the allowance after the clamp: neither gets one.
	noAllowance := testenv.Kube() || testenv.GVisor()
	switch {
	case noAllowance && len(allowed) > 0:
		t.Errorf("%d warm containers had a warm-up allowance their runtime cannot take back in full", len(allowed))
	case !noAllowance && runtime.NumCPU() > 1 && served == 0:
		t.Errorf("no warm container that served a run had a warm-up allowance")
	}
}

// A warm container serves one run: what a run leaves in /tmp is gone for
// the next, and the two ran in different containers.
func TestWarmContainerNeverReused(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools)
	code := "import os, socket\nseen = os.path.exists('/tmp/marker')\nopen('/tmp/marker', 'w').write('x')\n[seen, socket.gethostname()]"
	var first, second out
	warmCall(t, s, "python", map[string]any{"code": code}, &first)
	warmCall(t, s, "python", map[string]any{"code": code}, &second)
	if !strings.HasPrefix(first.Result, "[false,") || !strings.HasPrefix(second.Result, "[false,") {
		t.Fatalf("a run saw the marker of another: %s then %s", first.Result, second.Result)
	}
	if first.Result == second.Result {
		t.Fatalf("two runs in one container: %s", first.Result)
	}
	// R too.
	rcode := "seen <- file.exists('/tmp/marker')\nwriteLines('x', '/tmp/marker')\nc(as.character(seen), Sys.info()[['nodename']])"
	warmCall(t, s, "r", map[string]any{"code": rcode}, &first)
	warmCall(t, s, "r", map[string]any{"code": rcode}, &second)
	if !strings.HasPrefix(first.Result, `["FALSE",`) || !strings.HasPrefix(second.Result, `["FALSE",`) || first.Result == second.Result {
		t.Fatalf("R runs shared a container: %s then %s", first.Result, second.Result)
	}
}

// A request whose key matches no warm container (its own environment)
// runs cold, correctly, and is counted as a miss.
func TestWarmNonMatchingKeyRunsCold(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools)
	before := testenv.WaitWarm(t, s.Session, "python", 1)
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": "import os\nos.environ['GREETING']", "environment": map[string]any{"GREETING": "hi"}}, &o)
	if res.IsError || o.Result != `"hi"` {
		t.Fatalf("cold run with its own environment: %s", testenv.Text(res))
	}
	after := testenv.Pool(t, s.Session, "python")
	if after.Hits != before.Hits || after.Misses != before.Misses+1 {
		t.Fatalf("want one miss and no hit: before %+v after %+v", before, after)
	}
}

// The summed memory limits of warm containers stay under warm_memory.
func TestWarmMemoryCap(t *testing.T) {
	// 512m per container (execution.default_memory): 1g holds two of four.
	s := testenv.StartServer(t, "[plugins.python.config]\nwarm = 4\nwarm_memory = \"1g\"\n[plugins.r.config]\nwarm = 0\n")
	p := testenv.WaitWarm(t, s.Session, "python", 2)
	if p.MemoryCap != 1<<30 || p.Size != 4 {
		t.Fatalf("pool %+v", p)
	}
	// The pool is full when it stops starting; it must then hold two.
	testenv.WaitFor(t, "the pool to settle", time.Minute, func() bool {
		p = testenv.Pool(t, s.Session, "python")
		return p.Starting == 0
	})
	if p.Warm != 2 {
		t.Fatalf("%d warm containers under a cap for 2: %+v", p.Warm, p)
	}
	if n := len(testenv.Containers(t, s.Base, true, "io.mcp-forge.x-warm=true")); n != 2 {
		t.Fatalf("%d warm containers running, want 2", n)
	}
}

// A killed plugin takes its warm containers with it (the core removes a
// dead plugin's containers); the restarted plugin fills a new pool.
func TestWarmPoolSurvivesPluginCrash(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools+"[plugins.r.config]\nwarm = 0\n")
	testenv.WaitWarm(t, s.Session, "python", 2)
	old := testenv.Containers(t, s.Base, true, "io.mcp-forge.x-warm=true")
	var oldDirs []string // the warm containers' workspaces
	for _, id := range old {
		b, err := exec.Command("podman", "inspect", "--format", "{{range .Mounts}}{{.Source}} {{end}}", id).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range strings.Fields(string(b)) {
			if rel, err := filepath.Rel(filepath.Join(s.Base, "sessions"), src); err == nil && !strings.HasPrefix(rel, "..") {
				if d := filepath.Join(s.Base, "sessions", strings.Split(rel, string(filepath.Separator))[0]); !slices.Contains(oldDirs, d) {
					oldDirs = append(oldDirs, d)
				}
			}
		}
	}
	if len(oldDirs) == 0 {
		t.Fatalf("no workspace found for the warm containers %v", old)
	}
	killPlugin(t, s.Cmd.Process.Pid, "python")
	// Let the server notice the exit first, so that this is a crash between
	// calls (a call meeting the dead process is a crash mid-call, cleaned
	// up when it fails).
	testenv.WaitFor(t, "the server to notice the exit", time.Minute, func() bool {
		log, _ := os.ReadFile(strings.TrimSuffix(s.Config, ".toml") + ".log")
		return strings.Contains(string(log), "plugin process exited: plugin="+testenv.RepoRoot()+"/bin/mcp-forge-plugin-python")
	})
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": "6 * 7"}, &o)
	if res.IsError && strings.Contains(testenv.Text(res), "crashed") {
		// The call may meet the dead process before its exit is noticed:
		// it fails clearly, and the next one restarts the plugin.
		res = s.Call(t, "execute_python", map[string]any{"code": "6 * 7"}, &o)
	}
	if res.IsError || o.Result != "42" {
		t.Fatalf("after the crash: %s", testenv.Text(res))
	}
	p := testenv.WaitWarm(t, s.Session, "python", 2)
	t.Logf("refilled: %+v", p)
	testenv.WaitFor(t, "the dead plugin's warm containers to go", time.Minute, func() bool {
		now := strings.Join(testenv.Containers(t, s.Base, false), " ")
		for _, id := range old {
			if strings.Contains(now, id) {
				return false
			}
		}
		return true
	})
	// Their workspaces go too, not at shutdown only.
	for _, d := range oldDirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the dead plugin's warm workspace %s is still there (%v)", d, err)
		}
	}
	warmCall(t, s, "python", map[string]any{"code": "1"}, &o)
}

// Closing stdin stops the server cleanly, its pools full or still filling
// (a `make run` closed at once): its warm containers, and those of starts
// under way, are removed before it exits, and the stop logs no warning (a
// plugin's shutdown that waited for its starts' creates overran its
// deadline and was killed, and said so).
func TestWarmShutdownLeavesNoContainer(t *testing.T) {
	for _, c := range []struct {
		name  string
		ready func(t *testing.T, s *testenv.Server)
	}{
		{"pools full", func(t *testing.T, s *testenv.Server) {
			testenv.WaitWarm(t, s.Session, "python", 2)
			testenv.WaitWarm(t, s.Session, "r", 2)
			if n := len(testenv.Containers(t, s.Base, false)); n < 4 {
				t.Fatalf("%d containers before shutdown", n)
			}
		}},
		{"pools filling", func(t *testing.T, s *testenv.Server) {
			testenv.WaitFor(t, "warm starts under way", time.Minute, func() bool {
				p, r := testenv.Pool(t, s.Session, "python"), testenv.Pool(t, s.Session, "r")
				return p != nil && r != nil && p.Starting > 0 && r.Starting > 0
			})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := testenv.StartServer(t, testenv.DefaultPools)
			c.ready(t, s)
			n := len(testenv.Containers(t, s.Base, false))
			start := time.Now()
			s.Session.Close() // closes stdin, waits for the exit (SIGTERM after 5 s)
			took := time.Since(start)
			if s.Cmd.ProcessState == nil {
				t.Fatal("the server is still running after its client closed")
			}
			if c := testenv.Containers(t, s.Base, false); len(c) != 0 {
				t.Errorf("containers left once the server exited: %v", c)
			}
			log, err := os.ReadFile(strings.TrimSuffix(s.Config, ".toml") + ".log")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(log), "\n") {
				if strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]") {
					t.Errorf("a clean stop logged: %s", line)
				}
			}
			t.Logf("stop with %d containers: %s", n, took.Round(10*time.Millisecond))
		})
	}
}

// The timeout counts the code's run, not the container's start: an R run
// (about half a second to start) of 0.6 s fits a 1 s timeout, cold too.
func TestTimeoutCountsTheRunNotTheStart(t *testing.T) {
	s := testenv.StartServer(t, coldConfig)
	for i := 0; i < 2; i++ {
		var o out
		res := s.Call(t, "execute_r", map[string]any{"code": "Sys.sleep(0.6)\n'done'", "timeout": 1}, &o)
		if res.IsError || o.Result != `"done"` {
			t.Fatalf("a 0.6 s run timed out under a 1 s timeout: %s", testenv.Text(res))
		}
	}
}
