package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Code that makes a stateless call return while its sandbox keeps running:
// it answers on the resident runner's connection itself (the one socket it
// has open), or forks a child that goes on to answer while the parent (the
// runner) sleeps.
const (
	answerEarlyCode = "import json, os, stat, time\n" +
		"for fd in map(int, os.listdir('/proc/self/fd')):\n" +
		"    try:\n" +
		"        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n" +
		"            os.write(fd, (json.dumps({'repr': 'early'}) + '\\n').encode())\n" +
		"    except OSError:\n" +
		"        pass  # listdir's own descriptor, closed by now\n" +
		"time.sleep(200)\n"
	forkAnswersCode = "import os, time\n" +
		"if os.fork() != 0:\n" +
		"    time.sleep(200)\n" +
		"'child'\n"
)

// runContainer is the container that served run runID, from the audit log:
// the one created for it, or the warm one the plugin took for it.
func runContainer(t *testing.T, auditLog, runID string) string {
	t.Helper()
	for _, e := range auditEntries(t, auditLog) {
		if (e.Event == "container.create" || e.Event == "plugin.warm_run") && e.Details["run_id"] == runID {
			if id, _ := e.Details["container_id"].(string); id != "" {
				return id
			}
		}
	}
	t.Fatalf("no container in the audit log for run %s", runID)
	return ""
}

// lastRunID is the run id of the newest execution.request.
func lastRunID(t *testing.T, auditLog string) string {
	t.Helper()
	id := ""
	for _, e := range auditEntries(t, auditLog) {
		if e.Event == "execution.request" {
			id, _ = e.Details["run_id"].(string)
		}
	}
	return id
}

func containerExists(t *testing.T, id string) bool {
	t.Helper()
	out, err := exec.Command("podman", "ps", "-a", "-q", "--no-trunc", "--filter", "id="+id).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)) != ""
}

// A call whose code answers early returns at once, and its container is
// gone soon after, not at the run's timeout: warm and cold, answering on
// the channel itself or from a forked child.
func TestEarlyAnswerLeavesNoContainer(t *testing.T) {
	for _, pool := range []struct{ name, config string }{{"warm", testenv.DefaultPools}, {"cold", coldConfig}} {
		t.Run(pool.name, func(t *testing.T) {
			s := testenv.StartServer(t, pool.config+"[execution]\nmax_timeout = 300\n")
			for _, c := range []struct{ name, code, want string }{
				{"answers on the channel", answerEarlyCode, "early"},
				{"forked child answers", forkAnswersCode, "'child'"},
			} {
				t.Run(c.name, func(t *testing.T) {
					if pool.name == "warm" {
						testenv.WaitWarm(t, s.Session, "python", 1)
					}
					start := time.Now()
					var o out
					res := s.Call(t, "execute_python", map[string]any{"code": c.code, "timeout": 200}, &o)
					took := time.Since(start)
					if o.ResultRepr != c.want || took > 60*time.Second {
						t.Fatalf("after %s: %s %+v", took, testenv.Text(res), o)
					}
					id := runContainer(t, s.AuditLog, lastRunID(t, s.AuditLog))
					// The sleeping code must not keep the sandbox: it is
					// stopped and removed within seconds of the answer.
					testenv.WaitFor(t, "the early-answering run's container to be removed", 15*time.Second, func() bool { return !containerExists(t, id) })
					t.Logf("answered in %s; container %s gone %s after the call", took, id[:12], time.Since(start)-took)
				})
			}
		})
	}
}

// runSampler counts the server's running one-shot containers every few
// milliseconds until stop, and reports the most it saw.
func runSampler(t *testing.T, base string) (stop func() int) {
	t.Helper()
	done := make(chan struct{})
	most := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				most <- n
				return
			default:
			}
			out, err := exec.Command("podman", "ps", "-q", "--filter", "label=io.mcp-forge.instance="+forge.Instance(base),
				"--filter", "label=io.mcp-forge.one-shot=true").Output()
			if err == nil {
				n = max(n, len(strings.Fields(string(out))))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() int { close(done); return <-most }
}

// execution.max_concurrent_runs bounds sandboxes, not calls in flight: a
// run that answered early holds its slot until its container is gone, so
// six such runs with a limit of two never have more than two containers
// running. Calls over the limit wait their turn, as before.
func TestEarlyAnswersHoldRunSlots(t *testing.T) {
	s := testenv.StartServer(t, coldConfig+"[execution]\nmax_timeout = 300\nmax_concurrent_runs = 2\n")
	stop := runSampler(t, s.Base)
	var wg sync.WaitGroup
	errs := make(chan string, 6)
	start := time.Now()
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code := answerEarlyCode
			if i%2 == 1 {
				code = forkAnswersCode
			}
			if res := s.Call(t, "execute_python", map[string]any{"code": code, "timeout": 200}, nil); res.IsError {
				errs <- fmt.Sprintf("call %d: %s", i, testenv.Text(res))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	gone := false
	for deadline := time.Now().Add(30 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		gone = len(testenv.Containers(t, s.Base, false, "io.mcp-forge.one-shot=true")) == 0
	}
	most := stop()
	t.Logf("6 early-answering calls took %s; at most %d of their containers ran at once", took, most)
	if most > 2 {
		t.Errorf("%d containers of early-answering runs were running at once; execution.max_concurrent_runs = 2", most)
	}
	if !gone {
		t.Errorf("the runs' containers were still there 30 s after the calls returned")
	}
}
