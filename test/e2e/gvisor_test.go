package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Under security.isolation = "gvisor" the code talks to gVisor's kernel,
// not the host's: its /proc/version and kernel log are the Sentry's; it has
// a loopback and no other interface; MCP-Forge's seccomp profile still
// refuses what it refuses (EPERM: runsc answers every refusal so); threads,
// subprocesses and the session kernels work; the audit log names the
// isolation of every container.
func TestGVisorIsolation(t *testing.T) {
	testenv.RequireGVisor(t)
	s := testenv.StartServer(t, "")
	probe := `
import ctypes, json, os, socket, subprocess, threading
out = {}
out["version"] = open("/proc/version").read()
out["ifaces"] = sorted(n for _, n in socket.if_nameindex())
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(rc):
    return ctypes.get_errno() if rc == -1 else 0
out["unshare"] = errno_of(libc.unshare(0x10000000))
out["keyctl"] = errno_of(libc.syscall(250, 0, 0, 0, 0, 0))
out["ptrace"] = errno_of(libc.ptrace(16, 1, 0, 0))
t = threading.Thread(target=lambda: out.__setitem__("thread", True)); t.start(); t.join()
out["subprocess"] = subprocess.run(["echo", "child"], capture_output=True, text=True).stdout.strip()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); a, _ = srv.accept(); c.sendall(b"lo"); out["loopback"] = a.recv(2).decode()
print(json.dumps(out))
`
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": probe}, &o)
	if res.IsError || !o.Success {
		t.Fatalf("probe failed: %s", testenv.Text(res))
	}
	if o.Isolation != "gvisor" {
		t.Errorf("the result says isolation %q, want gvisor", o.Isolation)
	}
	var got struct {
		Version                 string
		Ifaces                  []string
		Unshare, Keyctl, Ptrace int
		Thread                  bool
		Subprocess, Loopback    string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &got); err != nil {
		t.Fatalf("%v: %q", err, o.Stdout)
	}
	if !strings.Contains(got.Version, "gvisor") {
		t.Errorf("/proc/version is the host's, not gVisor's: %q", got.Version)
	}
	if len(got.Ifaces) != 1 || got.Ifaces[0] != "lo" {
		t.Errorf("interfaces %v, want only lo", got.Ifaces)
	}
	const eperm = 1
	if got.Unshare != eperm || got.Keyctl != eperm || got.Ptrace != eperm {
		t.Errorf("the seccomp profile under gVisor: unshare %d, keyctl %d, ptrace %d; want EPERM (1) for each", got.Unshare, got.Keyctl, got.Ptrace)
	}
	if !got.Thread || got.Subprocess != "child" || got.Loopback != "lo" {
		t.Errorf("threads %v, subprocess %q, loopback %q", got.Thread, got.Subprocess, got.Loopback)
	}
	// The pids limit is the code's: the Sentry's own threads do not eat it
	// (default_pids 128 leaves room for 100 children).
	kids := "import subprocess\nps = []\ntry:\n    for _ in range(100):\n        ps.append(subprocess.Popen(['sleep', '30']))\nfinally:\n    print(len(ps))\n    [p.kill() for p in ps]\n"
	if res := s.Call(t, "execute_python", map[string]any{"code": kids}, &o); res.IsError || strings.TrimSpace(o.Stdout) != "100" {
		t.Errorf("100 children under gVisor with the default pids limit: %s", testenv.Text(res))
	}
	// A session's kernel (threads, zmq) and R under gVisor too.
	var so out
	if res := s.Call(t, "execute_python", map[string]any{"code": "open('/proc/version').read()", "session_id": "gv"}, &so); res.IsError || !strings.Contains(so.Result+so.ResultRepr, "gvisor") || so.Isolation != "gvisor" {
		t.Errorf("session: %s", testenv.Text(res))
	}
	checkSentryUser(t, s)
	checkNoHostSockets(t, s)
	if res := s.Call(t, "execute_r", map[string]any{"code": "cat(readLines('/proc/version'))\ncat(system('echo from-r', intern = TRUE))"}, &o); res.IsError || !strings.Contains(o.Stdout, "gvisor") || !strings.Contains(o.Stdout, "from-r") {
		t.Errorf("R: %s", testenv.Text(res))
	}
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "container.create" && e.Success && e.Details["isolation"] != "gvisor" {
			t.Errorf("container.create under isolation %v: %+v", e.Details["isolation"], e.Details)
		}
	}
}

// checkNoHostSockets: the sockets a gVisor sandbox listens on (the
// session kernel's, the warm runners') stay in its Sentry, where runsc can
// save them with the sandbox, and the core reaches them from inside
// (runtime.DialRelay); none is bound in a workspace on the host. The
// session above ran, so its channels were opened that way.
func checkNoHostSockets(t *testing.T, s *testenv.Server) {
	t.Helper()
	var socks []string
	filepath.WalkDir(s.Base, func(p string, d os.DirEntry, err error) error {
		// The core's own (egress's, the tool bridge's, its gVisor Podman
		// service's) are bound by the core, on the host.
		own := d != nil && (d.Name() == "egress.sock" || d.Name() == "bridge.sock" || strings.HasPrefix(d.Name(), "podman-gvisor-"))
		if err == nil && d.Type()&os.ModeSocket != 0 && !own {
			socks = append(socks, p)
		}
		return nil
	})
	if len(socks) > 0 {
		t.Errorf("sockets a gVisor sandbox bound on the host (it could not be checkpointed): %v", socks)
	}
	opened := 0
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "channel.open" && e.Success {
			opened++
		}
	}
	if opened == 0 {
		t.Error("no channel.open line: the session's kernel was not dialled through the core")
	}
}

// Every result says which isolation ran the code: the configuration's.
func TestResultSaysIsolation(t *testing.T) {
	s := testenv.StartServer(t, "")
	want := "container"
	if testenv.GVisor() {
		want = "gvisor"
	}
	var o out
	if res := s.Call(t, "execute_python", map[string]any{"code": "1"}, &o); res.IsError || o.Isolation != want {
		t.Errorf("isolation %q, want %q: %s", o.Isolation, want, testenv.Text(res))
	}
}

// checkSentryUser: the user namespace the code sees under gVisor is the
// Sentry's own (uid_map "0 0 4294967295"); what the host sees is the
// Sentry's process, which must not run as root or as a host account. A
// live session's sandbox is there to look at.
func checkSentryUser(t *testing.T, s *testenv.Server) {
	t.Helper()
	ids := map[string]bool{}
	for _, e := range auditEntries(t, s.AuditLog) {
		if id, _ := e.Details["container_id"].(string); e.Event == "container.create" && e.Success && id != "" {
			ids[id] = true
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := 0
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(cmd), "runsc-sandbox\x00") {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if !slices.ContainsFunc(args, func(a string) bool { return ids[a] }) {
			continue // another server's, or another test's
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "Uid:" {
				found++
				if f[1] == "0" || f[1] == "1000" || f[2] == "0" {
					t.Errorf("gVisor's Sentry runs as host uid %s (effective %s): %q", f[1], f[2], args)
				}
			}
		}
	}
	if found == 0 {
		t.Errorf("no runsc-sandbox process on the host runs one of this server's %d containers", len(ids))
	}
}
