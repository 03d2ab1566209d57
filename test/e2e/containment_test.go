package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// serverContainers lists every container (any state) labelled with a
// server's id.
func serverContainers(t *testing.T, serverID string) []string {
	t.Helper()
	out, err := exec.Command("podman", "ps", "-a", "-q", "--filter", "label="+runtime.LabelServer+"="+serverID).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// auditEntries reads an audit log; every line must be a JSON entry.
func auditEntries(t *testing.T, path string) []audit.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line is not JSON: %q", sc.Text())
		}
		out = append(out, e)
	}
	return out
}

// childrenMatching lists children of pid whose command line holds s.
func childrenMatching(pid int, s string) []int {
	var out []int
	for _, c := range testenv.ChildPids(pid) {
		cmdline, _ := os.ReadFile("/proc/" + itoa(c) + "/cmdline")
		if strings.Contains(string(cmdline), s) {
			out = append(out, c)
		}
	}
	return out
}

// killPlugin SIGKILLs the one process of plugin (e.g. "python") that the
// server at serverPid runs, as a crash would end it.
func killPlugin(t *testing.T, serverPid int, plugin string) {
	t.Helper()
	procs := childrenMatching(serverPid, "mcp-forge-plugin-"+plugin)
	if len(procs) != 1 {
		t.Fatalf("found %d %s plugin processes", len(procs), plugin)
	}
	syscall.Kill(procs[0], syscall.SIGKILL)
}

// killPluginsAtEnd kills, when the test ends, the plugin processes of a
// server the test is about to kill: they outlive it (making them exit with
// it is another change's business).
func killPluginsAtEnd(t *testing.T, serverPid int) {
	plugins := childrenMatching(serverPid, "mcp-forge-plugin-")
	t.Cleanup(func() {
		for _, p := range plugins {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// poll checks cond every 50 ms until it holds or bound passes.
func poll(bound time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(bound); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An MCP host that kills a slow server with SIGKILL must not leave user code
// running: the server's watchdog removes its containers within seconds, not
// at the next start, audits it, and exits.
func TestKilledServerLeavesNoContainers(t *testing.T) {
	// One warm container, which must go too.
	s := testenv.StartServer(t, testenv.NoSessionPools+"[plugins.python.config]\nwarm = 1\n[plugins.r.config]\nwarm = 0\n")
	pid := s.Cmd.Process.Pid
	id := procid.Of(pid)
	watchdogs := childrenMatching(pid, "watchdog")
	killPluginsAtEnd(t, pid)
	if len(watchdogs) != 1 {
		t.Fatalf("want one watchdog child of the server, found %v", watchdogs)
	}
	if pg, _ := syscall.Getpgid(watchdogs[0]); pg != watchdogs[0] {
		t.Errorf("the watchdog is in process group %d, not its own", pg)
	}
	if res := s.Call(t, "execute_python", map[string]any{"code": "x = 1", "session_id": "doomed"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	go s.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python",
		Arguments: map[string]any{"code": "import time; time.sleep(600)", "timeout": 600}})
	if !poll(60*time.Second, func() bool {
		p := testenv.Pool(t, s.Session, "python")
		return p != nil && p.InUse == 1 && p.Warm == 1 && len(serverContainers(t, id)) == 3
	}) {
		t.Fatalf("want the session's, the run's and a warm container, have %v", serverContainers(t, id))
	}
	mounted := mountsUnder(t, s.Base)
	killed := time.Now()
	s.Cmd.Process.Signal(syscall.SIGKILL)
	s.Cmd.Wait()
	if !poll(10*time.Second, func() bool { return len(serverContainers(t, id)) == 0 }) {
		t.Fatalf("10 s after SIGKILL the server's containers remain: %v", serverContainers(t, id))
	}
	t.Logf("containers gone %v after SIGKILL", time.Since(killed).Round(10*time.Millisecond))
	if !poll(10*time.Second, func() bool { return !alive(watchdogs[0]) }) {
		t.Error("the watchdog outlived its sweep")
	}
	// The workspace filesystems (volumes.enforce_quota) go with them.
	if left := mountsUnder(t, s.Base); len(left) > 0 {
		t.Errorf("the dead server's workspace filesystems remain after its watchdog ended: %v", left)
	}
	t.Logf("%d workspace filesystems were mounted at the kill", len(mounted))
	reaped := 0
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.ContainerReap && e.Success && e.Details["by"] == "watchdog" && e.Details["left_by"] == id {
			reaped++
		}
	}
	if reaped != 3 {
		t.Errorf("want 3 audited removals by the watchdog (session, run, warm), got %d", reaped)
	}
}

// A server that stops cleanly takes its watchdog with it.
func TestWatchdogEndsWithCleanServer(t *testing.T) {
	// With the warm pools on: their refills race the shutdown.
	s := testenv.StartServer(t, "")
	pid := s.Cmd.Process.Pid
	watchdogs := childrenMatching(pid, "watchdog")
	if len(watchdogs) != 1 {
		t.Fatalf("want one watchdog, found %v", watchdogs)
	}
	if res := s.Call(t, "execute_python", map[string]any{"code": "1"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	s.Session.Close() // stdin closes: the server stops cleanly
	if !poll(20*time.Second, func() bool { return !alive(pid) && !alive(watchdogs[0]) }) {
		t.Fatalf("server alive %v, watchdog alive %v", alive(pid), alive(watchdogs[0]))
	}
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.WatchdogEvent || e.Event == audit.ContainerReap {
			t.Errorf("a clean stop left work for the watchdog: %+v", e)
		}
	}
	if left := testenv.Containers(t, s.Base, false); len(left) != 0 {
		t.Errorf("a clean stop left containers: %v", left)
	}
}

// Exit 137 is out of memory only when the kernel says so: a memory bomb is
// OOM, os.kill(getpid(), 9) is a SIGKILL, in stateless runs and sessions.
func TestSIGKILLIsNotOOM(t *testing.T) {
	s := testenv.StartServer(t, "")
	call := sessionCaller(t, s, "execute_python")
	const bomb = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n    blocks[-1][::4096] = b'x' * len(blocks[-1][::4096])"
	const kill = "import os\nos.kill(os.getpid(), 9)"
	for _, c := range []struct {
		name, code, session, wantType, want string
	}{
		{"stateless memory bomb", bomb, "", "OutOfMemory", "out of memory"},
		{"stateless SIGKILL", kill, "", "Killed", "killed by signal 9 (SIGKILL)"},
		{"session memory bomb", bomb, "oom", "OutOfMemory", "out of memory"},
		{"session SIGKILL", kill, "kill", "KernelDied", "killed by signal 9 (SIGKILL)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.session != "" {
				if _, res := call("x = 1", c.session, 0); res.IsError {
					t.Fatal(testenv.Text(res))
				}
			}
			var o out
			var res *mcp.CallToolResult
			if c.session != "" {
				o, res = call(c.code, c.session, 60)
			} else {
				res = s.Call(t, "execute_python", map[string]any{"code": c.code, "timeout": 60}, &o)
			}
			if !res.IsError || o.Error == nil || o.Error.Type != c.wantType || !strings.Contains(o.Error.Message, c.want) {
				t.Fatalf("want %s saying %q, got %+v\n%s", c.wantType, c.want, o.Error, testenv.Text(res))
			}
			if c.wantType != "OutOfMemory" && strings.Contains(strings.ToLower(o.Error.Message), "memory") {
				t.Errorf("a SIGKILL is blamed on memory: %q", o.Error.Message)
			}
		})
	}
}

// A kernel that dies (and the restart that follows) raises no false alarm:
// the backend removing a container it already removed is not a violation.
func TestKernelDeathRaisesNoFalseAlarm(t *testing.T) {
	s := testenv.StartServer(t, "")
	call := sessionCaller(t, s, "execute_python")
	call("x = 1", "k", 0)
	if _, res := call("import os\nos.kill(os.getpid(), 9)", "k", 0); !res.IsError {
		t.Fatal("the kernel's death was not reported")
	}
	if o, res := call("'again'", "k", 0); res.IsError || o.ResultRepr != "'again'" {
		t.Fatalf("after the kernel died: %s", testenv.Text(res))
	}
	if res := s.Call(t, "restart_session", map[string]any{"session_id": "k"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if res := s.Call(t, "destroy_session", map[string]any{"session_id": "k"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.SecurityViolation || e.Severity == audit.Critical {
			t.Errorf("false alarm: %+v", e)
		}
	}
}

// No secret or code text in any audit line, ever: secrets planted in
// environment names and values, in code and in file names, through the real
// server, stateless and in a session; and no environment value in an error
// or the server's log, even one the OCI runtime would echo.
func TestAuditHoldsNoSecrets(t *testing.T) {
	s := testenv.StartServer(t, "")
	env := map[string]string{"PLANTEDNAME_A1": "PLANTEDVALUE-a1", "API_TOKEN": "PLANTEDVALUE-token", "PLAIN": "PLANTEDVALUE-plain"}
	code := "import os\nopen('PLANTEDFILE-x.png', 'wb').write(b'not a png')\nopen('/tmp/PLANTEDFILE-tmp', 'w').write('PLANTEDCONTENT')\n" +
		"secret = 'PLANTEDCODE-1'\nprint(len(os.environ['PLANTEDNAME_A1']))"
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": code, "environment": env}, &o)
	if res.IsError || o.Stdout != "15\n" {
		t.Fatalf("stateless: %s", testenv.Text(res))
	}
	res = s.Call(t, "execute_python", map[string]any{"code": code, "environment": env, "session_id": "sec"}, &o)
	if res.IsError || o.Stdout != "15\n" {
		t.Fatalf("session: %s", testenv.Text(res))
	}
	// A value with a NUL byte: refused before Podman, whose runtime would
	// print NAME=value in its error.
	nul := map[string]string{"PLANTEDNAME_B2": "PLANTEDVALUE-nul\x00PLANTEDVALUE-tail"}
	res = s.Call(t, "execute_python", map[string]any{"code": "1", "environment": nul}, nil)
	if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "NUL") || strings.Contains(text, "PLANTEDVALUE") {
		t.Fatalf("NUL in a value: %q", text)
	}
	if res := s.Call(t, "destroy_session", map[string]any{"session_id": "sec"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	raw, err := os.ReadFile(s.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, planted := range []string{"PLANTEDNAME", "PLANTEDVALUE", "API_TOKEN", "PLANTEDCODE", "PLANTEDFILE", "PLANTEDCONTENT"} {
		if strings.Contains(string(raw), planted) {
			t.Errorf("the audit log holds %s:\n%s", planted, raw)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(s.Base, "forge-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if strings.Contains(string(b), "PLANTEDVALUE") {
			t.Errorf("the server log %s holds an environment value:\n%s", l, b)
		}
	}
}

// If the audit log cannot be written, executions are refused with a clear
// error and no container is left; doctor says why; once the log is writable
// again executions resume without a restart.
func TestUnwritableAuditLogRefusesExecution(t *testing.T) {
	t.Run("directory in the way", func(t *testing.T) {
		s := testenv.StartServer(t, "")
		id := procid.Of(s.Cmd.Process.Pid)
		if res := s.Call(t, "execute_python", map[string]any{"code": "1"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		os.Rename(s.AuditLog, s.AuditLog+".before")
		os.Mkdir(s.AuditLog, 0o700)
		refused(t, s, id)
		doctor := exec.Command(testenv.Binary(t), "--config", s.Config, "doctor")
		doctor.Env = append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+s.Base, "FORGE_SECURITY_AUDIT_LOG="+s.AuditLog)
		report, _ := doctor.CombinedOutput()
		if !strings.Contains(string(report), "FAIL  audit log") || !strings.Contains(string(report), "is a directory") {
			t.Errorf("doctor does not say why:\n%s", report)
		}
		os.Remove(s.AuditLog)
		resumed(t, s)
	})
	t.Run("full filesystem", func(t *testing.T) {
		// The server's audit log (<base>/audit.log) is bind-mounted from a
		// 512k tmpfs, which the test then fills.
		base := testenv.BaseDir(t)
		small := filepath.Join(base, "small")
		os.Mkdir(small, 0o700)
		if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=512k"); err != nil {
			t.Skipf("cannot mount a tmpfs (needs root): %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
		log := filepath.Join(base, "audit.log")
		os.WriteFile(filepath.Join(small, "audit.log"), nil, 0o600)
		os.WriteFile(log, nil, 0o600)
		if err := syscall.Mount(filepath.Join(small, "audit.log"), log, "", syscall.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Unmount(log, syscall.MNT_DETACH) })
		s := testenv.StartServerAt(t, base, "")
		id := procid.Of(s.Cmd.Process.Pid)
		if res := s.Call(t, "execute_python", map[string]any{"code": "1"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		fill, _ := os.Create(filepath.Join(small, "fill"))
		fill.Write(make([]byte, 512<<10))
		fill.Close()
		// The log's last page may hold a few more lines: run until refused.
		var text string
		if !poll(time.Minute, func() bool {
			res := s.Call(t, "execute_python", map[string]any{"code": "print(3)"}, nil)
			text = testenv.Text(res)
			return res.IsError
		}) || !strings.Contains(text, "audit log cannot be written") || !strings.Contains(text, "no space left") {
			t.Fatalf("execution with a full audit filesystem: %q", text)
		}
		refused(t, s, id)
		os.Remove(filepath.Join(small, "fill"))
		resumed(t, s)
	})
}

func refused(t *testing.T, s *testenv.Server, serverID string) {
	t.Helper()
	// The warm pools' containers were created (and audited) before the log
	// broke: a refused execution must add none, and take none into use.
	containers := func() map[string]bool {
		out, err := exec.Command("podman", "ps", "-a", "--filter", "label="+runtime.LabelServer+"="+serverID, "--format", "{{.ID}}").Output()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, id := range strings.Fields(string(out)) {
			ids[id] = true
		}
		return ids
	}
	before := containers()
	for _, args := range []map[string]any{{"code": "print(2)"}, {"code": "y = 2", "session_id": "audit"}} {
		res := s.Call(t, "execute_python", args, nil)
		if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "audit log cannot be written") {
			t.Fatalf("execution with an unwritable audit log (%v): %q", args, text)
		}
		t.Logf("refused: %s", testenv.Text(res))
	}
	var added []string
	for id := range containers() {
		if !before[id] {
			added = append(added, id)
		}
	}
	if len(added) != 0 {
		t.Fatalf("containers created by refused executions: %v", added)
	}
}

func resumed(t *testing.T, s *testenv.Server) {
	t.Helper()
	var o out
	if res := s.Call(t, "execute_python", map[string]any{"code": "6*7"}, &o); res.IsError || o.ResultRepr != "42" {
		t.Fatalf("after the log was repaired: %s", testenv.Text(res))
	}
	// A cold run's container.create, or a warm container's plugin.warm_run
	// (its container was created, and audited, before the run).
	created := false
	for _, e := range auditEntries(t, s.AuditLog) {
		created = created || e.Event == audit.ContainerCreate && e.Success || e.Event == "plugin.warm_run" && e.Success
	}
	if !created {
		t.Fatal("the resumed execution was not audited")
	}
}

// mountsUnder lists the mount points below base, as /proc/self/mountinfo
// shows them (field 5; octal escapes are left as they are).
func mountsUnder(t *testing.T, base string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], base+"/") {
			out = append(out, f[4])
		}
	}
	return out
}
