package security

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

type execOut = mcpserver.ExecuteOutput

// probeCall is one system call the sandbox must refuse, with the errno the
// caller must get. Arguments are harmless even where a call goes through.
type probeCall struct {
	Name string  `json:"name"`
	Nr   uintptr `json:"nr"`
	Args []int64 `json:"args"`
	want syscall.Errno
}

const (
	cloneNewUser = 0x10000000
	cloneNewNS   = 0x00020000
	sigchld      = 17
)

// escapeCalls are the calls issue 10 names. Those marked "allowed today"
// succeed under Podman's default profile, so they fail this test on a core
// that does not apply MCP-Forge's profile.
var escapeCalls = []probeCall{
	{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, []int64{cloneNewUser}, syscall.EPERM}, // allowed today
	{"unshare(CLONE_NEWNS)", unix.SYS_UNSHARE, []int64{cloneNewNS}, syscall.EPERM},
	{"setns", unix.SYS_SETNS, []int64{-1, 0}, syscall.EPERM},
	{"clone(CLONE_NEWUSER)", unix.SYS_CLONE, []int64{cloneNewUser | sigchld, 0, 0, 0, 0}, syscall.EPERM}, // allowed today
	{"clone3", unix.SYS_CLONE3, []int64{0, 0}, syscall.ENOSYS},
	{"ptrace(PTRACE_SEIZE, 1)", unix.SYS_PTRACE, []int64{unix.PTRACE_SEIZE, 1, 0, 0}, syscall.EPERM},   // allowed today
	{"ptrace(PTRACE_ATTACH, 1)", unix.SYS_PTRACE, []int64{unix.PTRACE_ATTACH, 1, 0, 0}, syscall.EPERM}, // allowed today
	{"ptrace(PTRACE_TRACEME)", unix.SYS_PTRACE, []int64{unix.PTRACE_TRACEME, 0, 0, 0}, syscall.EPERM},  // allowed today
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV, []int64{1, 0, 0, 0, 0, 0}, syscall.EPERM},          // allowed today
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, []int64{1, 0, 0, 0, 0, 0}, syscall.EPERM},        // allowed today
	{"kcmp", unix.SYS_KCMP, []int64{1, 1, 0, 0, 0}, syscall.EPERM},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD, []int64{-1, 0, 0}, syscall.EPERM},
	{"keyctl(KEYCTL_GET_KEYRING_ID)", unix.SYS_KEYCTL, []int64{unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 1}, syscall.EPERM}, // allowed today
	{"add_key", unix.SYS_ADD_KEY, []int64{0, 0, 0, 0, 0}, syscall.EPERM},
	{"request_key", unix.SYS_REQUEST_KEY, []int64{0, 0, 0, 0}, syscall.EPERM},
	{"bpf", unix.SYS_BPF, []int64{0, 0, 0}, syscall.EPERM},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, []int64{0, 0, -1, -1, 0}, syscall.EPERM},
	{"userfaultfd", unix.SYS_USERFAULTFD, []int64{0}, syscall.EPERM},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP, []int64{1, 0}, syscall.ENOSYS},
	{"mount", unix.SYS_MOUNT, []int64{0, 0, 0, 0, 0}, syscall.EPERM},
	{"umount2", unix.SYS_UMOUNT2, []int64{0, 0}, syscall.EPERM},
	{"fsopen", unix.SYS_FSOPEN, []int64{0, 0}, syscall.EPERM},
	{"fsmount", unix.SYS_FSMOUNT, []int64{-1, 0, 0}, syscall.EPERM},
	{"fsconfig", unix.SYS_FSCONFIG, []int64{-1, 0, 0, 0, 0}, syscall.EPERM},
	{"open_tree", unix.SYS_OPEN_TREE, []int64{-100, 0, 0}, syscall.EPERM},
	{"move_mount", unix.SYS_MOVE_MOUNT, []int64{-1, 0, -1, 0, 0}, syscall.EPERM},
	{"pivot_root", unix.SYS_PIVOT_ROOT, []int64{0, 0}, syscall.EPERM},
	{"chroot", unix.SYS_CHROOT, []int64{0}, syscall.EPERM},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, []int64{-100, 0, 0, 0, 0}, syscall.EPERM}, // allowed today
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, []int64{-1, 0, 0}, syscall.EPERM},
	{"kexec_load", unix.SYS_KEXEC_LOAD, []int64{0, 0, 0, 0}, syscall.EPERM},
	{"init_module", unix.SYS_INIT_MODULE, []int64{0, 0, 0}, syscall.EPERM},
	{"finit_module", unix.SYS_FINIT_MODULE, []int64{-1, 0, 0}, syscall.EPERM},
	{"delete_module", unix.SYS_DELETE_MODULE, []int64{0, 0}, syscall.EPERM},
	{"acct", unix.SYS_ACCT, []int64{0}, syscall.EPERM},
	{"swapon", unix.SYS_SWAPON, []int64{0, 0}, syscall.EPERM},
	{"swapoff", unix.SYS_SWAPOFF, []int64{0}, syscall.EPERM},
	{"reboot", unix.SYS_REBOOT, []int64{0, 0, 0, 0}, syscall.EPERM},
	{"settimeofday", unix.SYS_SETTIMEOFDAY, []int64{0, 0}, syscall.EPERM},
	{"clock_settime", unix.SYS_CLOCK_SETTIME, []int64{0, 0}, syscall.EPERM},
	{"adjtimex", unix.SYS_ADJTIMEX, []int64{0}, syscall.EPERM},
	{"quotactl", unix.SYS_QUOTACTL, []int64{0, 0, 0, 0}, syscall.EPERM},
	{"syslog(SIZE_BUFFER)", unix.SYS_SYSLOG, []int64{10, 0, 0}, syscall.EPERM},
	{"vhangup", unix.SYS_VHANGUP, nil, syscall.EPERM},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, []int64{0, 0, 0}, syscall.EPERM},
	{"sethostname", unix.SYS_SETHOSTNAME, []int64{0, 0}, syscall.EPERM},
	{"personality(READ_IMPLIES_EXEC)", unix.SYS_PERSONALITY, []int64{0x0400000}, syscall.ENOSYS}, // allowed today
}

// seccompProbe runs each call in a forked child, so a call that goes
// through (unshare today) cannot change the next one, and prints one JSON
// line [name, errno] per call (0: the call succeeded), flushed, so that a
// probe that hangs still shows what it got. It also runs unshare(1) as a
// user would and reports the seccomp mode.
const seccompProbe = `
import ctypes, json, os, subprocess
CALLS = json.loads(%q)
libc = ctypes.CDLL(None, use_errno=True)
def report(name, value):
    print(json.dumps([name, value]), flush=True)
report("seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
p = subprocess.run(["unshare", "-Urm", "id", "-u"], capture_output=True, text=True)
report("unshare -Urm", [p.returncode, p.stdout + p.stderr])
for c in CALLS:
    pid = os.fork()
    if pid == 0:
        r = libc.syscall(ctypes.c_long(c["nr"]), *[ctypes.c_long(a) for a in (c["args"] or [])])
        os._exit(0 if r >= 0 else min(ctypes.get_errno(), 255))
    report(c["name"], os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
`

// TestSeccompRefusesEscapeCalls runs, through the real server and an MCP
// client, every call MCP-Forge's profile must refuse, and checks the errno,
// in a container started for the run and in one from the warm pool.
// Under Podman's default profile it fails: unshare gives uid 0 in a new
// user namespace, and PTRACE_ATTACH on pid 1 stops the container's init so
// that the run hangs until its timeout.
func TestSeccompRefusesEscapeCalls(t *testing.T) {
	for _, m := range runModes {
		t.Run(m.name, func(t *testing.T) { seccompRefusesEscapeCalls(t, m) })
	}
}

func seccompRefusesEscapeCalls(t *testing.T, m runMode) {
	s := testenv.StartServer(t, m.config)
	calls, _ := json.Marshal(escapeCalls)
	var o execOut
	res := m.call(t, s, "python", map[string]any{"code": fmt.Sprintf(seccompProbe, calls), "timeout": 30}, &o)
	got := map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
		var kv [2]any
		if json.Unmarshal([]byte(line), &kv) == nil {
			got[fmt.Sprint(kv[0])] = kv[1]
		}
	}
	if len(got) == 0 {
		t.Fatalf("probe failed: %s", testenv.Text(res))
	}
	if res.IsError {
		t.Errorf("probe failed (an escape call may have stopped the container's init): %s", testenv.Text(res))
	}
	if got["seccomp"] != "2" {
		t.Errorf("no seccomp filter in the sandbox: Seccomp: %v", got["seccomp"])
	}
	t.Run("unshare -Urm", func(t *testing.T) {
		r, _ := got["unshare -Urm"].([]any)
		if len(r) != 2 || r[0] == float64(0) || !strings.Contains(fmt.Sprint(r[1]), "Operation not permitted") {
			t.Errorf("unshare -Urm id -u: %v (want a refusal: Operation not permitted)", r)
		}
	})
	for _, c := range escapeCalls {
		t.Run(c.Name, func(t *testing.T) {
			e, ok := got[c.Name].(float64)
			if !ok {
				t.Fatalf("no result for %s in %v", c.Name, got)
			}
			want := c.want
			if testenv.GVisor() {
				// runsc answers every refusal of the profile with EPERM
				// (it ignores errnoRet), and gVisor's variant allows
				// clone3 (core/seccomp): the probe's bogus arguments
				// then get EINVAL from the Sentry.
				switch {
				case c.Name == "clone3":
					want = syscall.EINVAL
				case want == syscall.ENOSYS:
					want = syscall.EPERM
				}
			}
			if syscall.Errno(e) != want {
				t.Errorf("%s: errno %d (%v), want %d (%v)", c.Name, int(e), syscall.Errno(e), int(want), want)
			}
		})
	}
}

// TestSeccompKeepsWorkloads: what the sandbox is for still works under the
// profile: numpy, pandas, matplotlib, threads, multiprocessing, subprocess,
// an R run, and Python and R sessions (ipykernel and IRkernel over ZeroMQ
// ipc sockets).
func TestSeccompKeepsWorkloads(t *testing.T) {
	s := testenv.StartServer(t, "")
	py := `
import threading, multiprocessing, subprocess, concurrent.futures, os
import numpy as np, pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.random.default_rng(0).standard_normal((300, 300))
inv_ok = bool(np.allclose(a @ np.linalg.inv(a), np.eye(300), atol=1e-6))
df = pd.DataFrame({"g": list("abab"), "v": [1, 2, 3, 4]})
sums = df.groupby("g")["v"].sum().to_dict()
plt.plot([1, 2, 3]); plt.savefig("/tmp/p.png"); png = os.path.getsize("/tmp/p.png")
box = []
ts = [threading.Thread(target=box.append, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
with multiprocessing.Pool(2) as pool:
    squares = pool.map(abs, [-1, -2, -3])
with concurrent.futures.ProcessPoolExecutor(2) as ex:
    procs = sorted(ex.map(abs, [-5, -4]))
echo = subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout.strip()
{"inv": inv_ok, "sums": sums, "png": png > 1000, "threads": len(box), "pool": squares, "procs": procs, "echo": echo}
`
	var o execOut
	res := s.Call(t, "execute_python", map[string]any{"code": py, "timeout": 120}, &o)
	if res.IsError {
		t.Fatalf("python workload failed: %s", testenv.Text(res))
	}
	want := map[string]any{"inv": true, "sums": map[string]any{"a": float64(4), "b": float64(6)}, "png": true,
		"threads": float64(8), "pool": []any{float64(1), float64(2), float64(3)}, "procs": []any{float64(4), float64(5)}, "echo": "hi"}
	var got any // result is the value's JSON text
	if err := json.Unmarshal([]byte(fmt.Sprint(o.Result)), &got); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("python workload: %v, want %v", o.Result, want)
	}

	res = s.Call(t, "execute_r", map[string]any{"code": "m <- matrix(rnorm(100), 10)\nx <- system('echo hi', intern = TRUE)\nc(dim(solve(m)), nchar(x))"}, &o)
	if res.IsError || fmt.Sprint(o.Result) != "[10,10,2]" {
		t.Errorf("R run: %v %s", o.Result, testenv.Text(res))
	}

	for _, sc := range []struct{ tool, code, check, want string }{
		{"execute_python", "import numpy as np, threading\nv = np.arange(10).sum()", "int(v)", "45"},
		{"execute_r", "v <- sum(1:10)", "v", "55"},
	} {
		sid := "seccomp-" + strings.TrimPrefix(sc.tool, "execute_")
		if res := s.Call(t, sc.tool, map[string]any{"code": sc.code, "session_id": sid}, &o); res.IsError {
			t.Fatalf("%s session: %s", sc.tool, testenv.Text(res))
		}
		if res := s.Call(t, sc.tool, map[string]any{"code": sc.check, "session_id": sid}, &o); res.IsError || !strings.Contains(fmt.Sprint(o.Result)+o.Stdout+o.ResultRepr, sc.want) {
			t.Errorf("%s session: state lost or wrong: %+v %s", sc.tool, o, testenv.Text(res))
		}
	}
}
