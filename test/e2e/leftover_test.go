package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// After stateless runs (through a stateless plugin and through the throw-
// away sessions of session backends, ours and a third party's) only the
// workspaces of live sessions exist under <base>/sessions, and after those
// sessions are destroyed nothing does. The jupyter backend used to leave one
// workspace per stateless run. The bash plugin, loaded by [plugins.bash]
// with a pinned sha256, keeps `export X=1` for the next call. The warm
// kernels of the session pools wait in pool workspaces (at most one per
// pool); they are not leftovers.
func TestNothingLeftUnderBase(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/bashplugin")
	sum, err := plugins.Checksum(bin)
	if err != nil {
		t.Fatal(err)
	}
	// bash has sessions only: a call without session_id runs in a throw-away
	// session when the configuration makes it the stateless default.
	s := testenv.StartServer(t, coldConfig+"[execution.default_backend]\nbash = \"bash\"\n[plugins.bash]\npath = \""+bin+"\"\nsha256 = \""+sum+"\"\n")
	call := func(tool string, args map[string]any) out {
		t.Helper()
		var o out
		if res := s.Call(t, tool, args, &o); res.IsError || !o.Success {
			t.Fatalf("%s %v: %s", tool, args, testenv.Text(res))
		}
		return o
	}
	call("execute_python", map[string]any{"code": "print(1)"})
	call("execute_python", map[string]any{"code": "print(2)", "backend": "jupyter"})
	call("execute_bash", map[string]any{"code": "echo 3"})
	call("execute_python", map[string]any{"code": "x = 1", "session_id": "py1"})
	call("execute_bash", map[string]any{"code": "export X=41", "session_id": "sh1"})
	if o := call("execute_bash", map[string]any{"code": "echo $((X + 1))", "session_id": "sh1"}); o.Stdout != "42\n" {
		t.Fatalf("bash session state: %+v", o)
	}
	dir := filepath.Join(s.Base, "sessions")
	// py1's workspace is its own, or the pool workspace of the warm kernel
	// it took (session.create says which).
	py1 := ""
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "session.create" && e.Details["session"] == "py1" {
			py1, _ = e.Details["workspace"].(string)
			if py1 == "" {
				py1 = e.SessionID
			}
		}
	}
	list := func() []string {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		pooled := 0
		for _, e := range entries {
			// The warm kernels of the jupyter and irkernel pools (one each)
			// wait in workspaces of their own, named by a pool id; a session
			// that took one has that workspace and no other.
			if strings.HasPrefix(e.Name(), "wp") && !strings.HasPrefix(e.Name(), py1+".") {
				pooled++
				continue
			}
			names = append(names, e.Name())
		}
		if pooled > 2 {
			t.Errorf("%d pool workspaces under %s, more than the two pools hold", pooled, dir)
		}
		sort.Strings(names)
		return names
	}
	// A stateless run's workspace goes with its container, just after the
	// result came back.
	if !poll(30*time.Second, func() bool { return len(list()) == 2 }) || !slices.ContainsFunc(list(), func(n string) bool { return strings.HasPrefix(n, py1+".") }) {
		t.Fatalf("want only the two live sessions' workspaces under %s (py1's is %s), got %v", dir, py1, list())
	}
	for _, id := range []string{"py1", "sh1"} {
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": id}, nil); res.IsError {
			t.Fatalf("destroy %s: %s", id, testenv.Text(res))
		}
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("left under %s after destroy: %v", dir, got)
	}
}

// killServer SIGKILLs a server as an impatient MCP host would; with
// watchdogToo its watchdog first (a kill of the whole tree, an OOM kill of
// the unit), so that nothing cleans up until the next server starts. It
// returns the server's watchdog pids.
func killServer(t *testing.T, s *testenv.Server, watchdogToo bool) []int {
	t.Helper()
	pid := s.Cmd.Process.Pid
	watchdogs := childrenMatching(pid, "watchdog")
	if len(watchdogs) != 1 {
		t.Fatalf("want one watchdog child of the server, found %v", watchdogs)
	}
	if watchdogToo {
		syscall.Kill(watchdogs[0], syscall.SIGKILL)
	}
	plugins := childrenMatching(pid, "mcp-forge-plugin-")
	s.Cmd.Process.Signal(syscall.SIGKILL)
	s.Cmd.Wait()
	t.Cleanup(func() {
		for _, p := range plugins {
			if alive(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return watchdogs
}

// busyServer starts a server with its warm pools filled (stateless python,
// the jupyter and irkernel kernel pools) and a session open, so that it
// holds workspace filesystems of every kind when it is killed.
func busyServer(t *testing.T, base string) *testenv.Server {
	t.Helper()
	s := testenv.StartServerAt(t, base, testenv.DefaultPools)
	for _, p := range []string{"python", "jupyter", "irkernel"} {
		testenv.WaitWarm(t, s.Session, p, 1)
	}
	if res := s.Call(t, "execute_python", map[string]any{"code": "open('kept.txt', 'w').write('x')", "session_id": "doomed"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if len(testenv.MountsUnder(base)) < 3 {
		t.Fatalf("want the workspace filesystems of the pools and the session mounted, have %v", testenv.MountsUnder(base))
	}
	return s
}

// A SIGKILLed server's watchdog releases everything the server held on the
// host, not only its containers: every workspace filesystem unmounted, every
// loop device detached, every workspace directory and the server's quota
// state removed. Before, the watchdog unmounted and left the directories.
func TestKilledServerLeavesNothingOnHost(t *testing.T) {
	testenv.Require(t)
	base := testenv.BaseDir(t)
	s := busyServer(t, base)
	before := testenv.Leftovers(base)
	watchdogs := killServer(t, s, false)
	if !poll(60*time.Second, func() bool { return !alive(watchdogs[0]) }) {
		t.Fatal("the watchdog did not end within a minute of its server")
	}
	if left := testenv.Leftovers(base); len(left) > 0 {
		t.Fatalf("after the watchdog of the killed server ended, left under %s: %v\n(held at the kill: %v)", base, left, before)
	}
}

// A server killed together with its watchdog leaves its workspace
// filesystems mounted; the next server on the base path releases them at
// start, loop devices and directories included.
func TestStaleWorkspacesReleasedAtStart(t *testing.T) {
	testenv.Require(t)
	base := testenv.BaseDir(t)
	s := busyServer(t, base)
	killServer(t, s, true)
	stale := testenv.Leftovers(base)
	if len(testenv.MountsUnder(base)) == 0 || len(testenv.LoopsUnder(base)) == 0 {
		t.Fatalf("with its watchdog killed too, the server's filesystems should still be mounted; left: %v", stale)
	}
	next := testenv.StartServerAt(t, base, testenv.NoSessionPools+"[plugins.python.config]\nwarm = 0\n")
	if res := next.Call(t, "execute_python", map[string]any{"code": "1"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	now := map[string]bool{}
	for _, l := range testenv.Leftovers(base) {
		now[l] = true
	}
	var remain []string
	for _, l := range stale {
		if now[l] {
			remain = append(remain, l)
		}
	}
	if len(remain) > 0 {
		t.Fatalf("the next server on %s left the killed server's %v", base, remain)
	}
}
