package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// warmKernelEvents are the warm kernels a plugin reported ready (plugin.kernel.warm).
func warmKernelEvents(t *testing.T, s *testenv.Server, plugin string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "plugin.kernel.warm" && e.Details["plugin"] == plugin {
			out = append(out, e)
		}
	}
	return out
}

func waitWarmKernels(t *testing.T, s *testenv.Server, plugin string, n int) {
	t.Helper()
	testenv.WaitFor(t, plugin+" warm kernels", 3*time.Minute, func() bool { return len(warmKernelEvents(t, s, plugin)) >= n })
}

// sessionStarts is the session.create audit entry of a session.
func sessionStarts(t *testing.T, s *testenv.Server, sid string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.SessionCreate && e.Details["session"] == sid {
			out = append(out, e)
		}
	}
	return out
}

// confinementProbe prints what a sandboxed process can see of its limits.
const confinementProbe = `
import os, socket, json
def rd(p):
    try:
        return open(p).read().strip()
    except OSError as e:
        return "error: " + type(e).__name__
out = {"ifaces": sorted(n for _, n in socket.if_nameindex()), "uid": os.getuid(), "cwd": os.getcwd()}
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2); out["connect"] = "connected"
except OSError as e:
    out["connect"] = type(e).__name__
try:
    open("/forge-root-write", "w"); out["root_write"] = "written"
except OSError as e:
    out["root_write"] = e.strerror
out["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["nonewprivs"] = st["NoNewPrivs"].strip(); out["capeff"] = st["CapEff"].strip(); out["seccomp"] = st["Seccomp"].strip()
out["uid_map"] = open("/proc/self/uid_map").read().split()
out["memory"] = rd("/sys/fs/cgroup/memory/memory.limit_in_bytes")
out["pids"] = rd("/sys/fs/cgroup/pids/pids.max")
out["cpu"] = rd("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
out["nofile"] = open("/proc/self/limits").read().split("Max open files")[1].split()[:2]
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
out["unshare"] = "allowed" if libc.unshare(0x10000000) == 0 else os.strerror(ctypes.get_errno())  # CLONE_NEWUSER
print(json.dumps(out, sort_keys=True))
`

// A session that takes a warm kernel is confined exactly as one started
// cold (the same probe, field by field, and the absolute rules); its files
// tools work on the workspace it took over; when its kernel dies, the
// restarted kernel is cold and mounts the same files.
func TestWarmSessionConfinedLikeCold(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools)
	waitWarmKernels(t, s, "jupyter", 1)
	probe := func(sid string, env map[string]any) map[string]any {
		t.Helper()
		args := map[string]any{"code": confinementProbe, "session_id": sid}
		if env != nil {
			args["environment"] = env
		}
		var o out
		if res := s.Call(t, "execute_python", args, &o); res.IsError || !o.Success {
			t.Fatalf("probe in %s: %s", sid, testenv.Text(res))
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(o.Stdout), &m); err != nil {
			t.Fatalf("probe output %q: %v", o.Stdout, err)
		}
		return m
	}
	warm := probe("warm", nil)
	// An environment makes the request differ from the pool's kernels.
	cold := probe("cold", map[string]any{"TEST_COLD": "1"})
	for sid, want := range map[string]bool{"warm": true, "cold": false} {
		st := sessionStarts(t, s, sid)
		if len(st) != 1 || st[0].Details["warm"] != want {
			t.Fatalf("session %s started warm=%v, want %v: %+v", sid, st, want, st)
		}
	}
	// environment/info shows the session pool: one taken, one missed (the
	// request with an environment).
	if p := testenv.Pool(t, s.Session, "jupyter"); p == nil || p.Size != 1 || p.Hits != 1 || p.Misses != 1 || p.Refills < 1 {
		t.Errorf("jupyter's warm pool in environment/info: %+v", p)
	}
	t.Logf("warm: %v", warm)
	if len(warm) != len(cold) {
		t.Errorf("probes differ in fields: warm %v, cold %v", warm, cold)
	}
	for k, v := range cold {
		if a, b := probeText(v), probeText(warm[k]); a != b {
			t.Errorf("%s: warm %s, cold %s", k, b, a)
		}
	}
	checks := map[string]string{"ifaces": `["lo"]`, "root_write": `"` + testenv.RootWriteError() + `"`, "root_ro": "true", "nonewprivs": `"1"`, "seccomp": `"2"`,
		"capeff": `"0000000000000000"`, "unshare": `"Operation not permitted"`}
	for k, want := range checks {
		if got := probeText(warm[k]); got != want {
			t.Errorf("warm %s = %s, want %s", k, got, want)
		}
	}
	if warm["connect"] == "connected" || warm["uid"] == float64(0) || strings.HasPrefix(probeText(warm["memory"]), `"error`) {
		t.Errorf("warm session: connect %v uid %v memory %v", warm["connect"], warm["uid"], warm["memory"])
	}

	// Files: the upload lands where the warm kernel's code reads it.
	if res := s.Call(t, "upload_file", map[string]any{"session_id": "warm", "path": "data.txt", "content": "forty-two"}, nil); res.IsError {
		t.Fatalf("upload: %s", testenv.Text(res))
	}
	read := func() out {
		var o out
		if res := s.Call(t, "execute_python", map[string]any{"code": "open('data.txt').read()", "session_id": "warm"}, &o); res.IsError {
			t.Fatalf("read: %s", testenv.Text(res))
		}
		return o
	}
	if o := read(); !strings.Contains(o.ResultRepr, "forty-two") {
		t.Fatalf("the warm kernel does not see the uploaded file: %+v", o)
	}
	// The kernel dies: the restart is cold, on the same workspace.
	s.Call(t, "execute_python", map[string]any{"code": "import os; os._exit(3)", "session_id": "warm"}, nil)
	o := read()
	if !strings.Contains(o.ResultRepr, "forty-two") || len(o.Notices) == 0 {
		t.Fatalf("after the kernel died the restarted session lost its files: %+v", o)
	}
	st := sessionStarts(t, s, "warm")
	if len(st) != 2 || st[1].Details["warm"] != false {
		t.Fatalf("the restart took a warm kernel (its workspace is not the session's): %+v", st)
	}
	if res := s.Call(t, "destroy_session", map[string]any{"session_id": "warm"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	ws, _ := st[0].Details["workspace"].(string)
	entries, _ := os.ReadDir(filepath.Join(s.Base, "sessions"))
	for _, e := range entries {
		if ws != "" && strings.HasPrefix(e.Name(), ws+".") {
			t.Errorf("the destroyed session's pool workspace %s is left", e.Name())
		}
	}
}

func probeText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Sessions started together never share a kernel: each gets its own
// container (hostname) and namespace, and each pool workspace is bound to
// one session.
func TestWarmSessionNeverShared(t *testing.T) {
	s := testenv.StartServer(t, "[plugins.jupyter.config]\nwarm = 2\n")
	waitWarmKernels(t, s, "jupyter", 2)
	const n = 4
	hosts := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := "share" + itoa(i)
			var o out
			res := s.Call(t, "execute_python", map[string]any{"code": "import socket\nmine = '" + sid + "'\nprint(socket.gethostname())", "session_id": sid}, &o)
			if res.IsError || !o.Success {
				t.Errorf("%s: %s", sid, testenv.Text(res))
				return
			}
			hosts[i] = strings.TrimSpace(o.Stdout)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	workspaces := map[string]string{}
	warm := 0
	for i := range n {
		sid := "share" + itoa(i)
		if hosts[i] == "" || seen[hosts[i]] {
			t.Errorf("%s ran in container %q, already used by another session (all: %v)", sid, hosts[i], hosts)
		}
		seen[hosts[i]] = true
		var o out
		if res := s.Call(t, "execute_python", map[string]any{"code": "mine", "session_id": sid}, &o); res.IsError || o.ResultRepr != "'"+sid+"'" {
			t.Errorf("%s sees mine = %s: %s", sid, o.ResultRepr, testenv.Text(res))
		}
		for _, e := range sessionStarts(t, s, sid) {
			if w, _ := e.Details["workspace"].(string); w != "" {
				warm++
				if other, dup := workspaces[w]; dup {
					t.Errorf("pool workspace %s given to %s and %s", w, other, sid)
				}
				workspaces[w] = sid
			}
		}
	}
	if warm == 0 {
		t.Error("no session took a warm kernel")
	}
	t.Logf("%d of %d sessions started warm", warm, n)
}

// The jupyter plugin crashes: its warm kernel's container is removed with
// its other containers, the next session works, and the restarted plugin
// fills its pool again, from which a later session starts warm.
func TestWarmSessionPoolSurvivesPluginCrash(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools)
	waitWarmKernels(t, s, "jupyter", 1)
	first, _ := warmKernelEvents(t, s, "jupyter")[0].Details["container"].(string)
	killPlugin(t, s.Cmd.Process.Pid, "jupyter")
	// The crash is noticed and the plugin's containers removed; the first
	// call after it may be told the plugin crashed, then it is restarted.
	var o out
	testenv.WaitFor(t, "a session after the crash", 3*time.Minute, func() bool {
		res := s.Call(t, "execute_python", map[string]any{"code": "6 * 7", "session_id": "after"}, &o)
		return !res.IsError && o.Result == "42"
	})
	testenv.WaitFor(t, "the crashed plugin's warm container to be removed", time.Minute, func() bool {
		for _, id := range testenv.Containers(t, s.Base, false) {
			if strings.HasPrefix(first, id) {
				return false
			}
		}
		return true
	})
	waitWarmKernels(t, s, "jupyter", 2)
	if res := s.Call(t, "execute_python", map[string]any{"code": "1 + 1", "session_id": "refilled"}, &o); res.IsError || o.Result != "2" {
		t.Fatalf("after the refill: %s", testenv.Text(res))
	}
	if st := sessionStarts(t, s, "refilled"); len(st) != 1 || st[0].Details["warm"] != true {
		t.Fatalf("the session after the refill did not start warm: %+v", st)
	}
}

// Shutdown drains the pools: once the server has exited no container of it
// is left, running or not, and no workspace.
func TestWarmSessionShutdownLeavesNothing(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools)
	waitWarmKernels(t, s, "jupyter", 1)
	waitWarmKernels(t, s, "irkernel", 1)
	if n := len(testenv.Containers(t, s.Base, true)); n < 2 {
		t.Fatalf("%d running containers with two warm kernels ready", n)
	}
	// Closing stdin ends the server (the transport waits for it to exit).
	s.Session.Close()
	if s.Cmd.ProcessState == nil {
		t.Fatal("the server is still running after its client closed")
	}
	if c := testenv.Containers(t, s.Base, false); len(c) != 0 {
		t.Errorf("containers left after shutdown: %v", c)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Base, "sessions"))
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("workspaces left after shutdown: %v", names)
	}
}
