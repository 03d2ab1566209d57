package security

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// pythonImage is the image the python plugin declares (config no longer
// names images: each plugin does).
const pythonImage = "mcp-forge/python:3.11"

// run executes a Python snippet in a sandbox with the given limits.
func run(t *testing.T, c *testenv.Core, code string, lim func(*runtime.Limits)) (sandbox.RunResult, error) {
	t.Helper()
	l := c.Manager.Policy().Settings().Defaults
	l.Timeout = 60 * time.Second
	if lim != nil {
		lim(&l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return c.Manager.Run(ctx, policy.Intent{
		Image: pythonImage, Command: []string{"python3", "-c", code},
		Limits: l, Plugin: "test", Labels: map[string]string{runtime.LabelCodeHash: audit.HashCode(code)},
	}, 1<<20)
}

func TestSandboxConfinement(t *testing.T) {
	c := testenv.NewCore(t, nil)
	probe := `
import os, socket, json
out = {"ifaces": sorted(n for _, n in socket.if_nameindex()), "uid": os.getuid(), "gid": os.getgid()}
try:
    s = socket.create_connection(("1.1.1.1", 80), timeout=3); out["connect"] = "connected"
except OSError as e:
    out["connect"] = type(e).__name__ + ": " + str(e)
try:
    open("/forge-root-write", "w"); out["root_write"] = "written"
except OSError as e:
    out["root_write"] = str(e)
out["root_ro"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
try:
    open("/tmp/ok", "w").write("x"); out["tmp_write"] = "ok"
except OSError as e:
    out["tmp_write"] = str(e)
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out["nonewprivs"] = st["NoNewPrivs"].strip(); out["capeff"] = st["CapEff"].strip()
out["uid_map"] = open("/proc/self/uid_map").read().split()
out["procs"], out["api_env"] = 0, []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
        cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")[:3]
    except OSError:
        continue
    out["procs"] += 1
    out["api_env"] += [pid + " " + repr(cmd) for e in env if e.startswith(b"KUBERNETES_")][:1]
print(json.dumps(out))
`
	res, err := run(t, c, probe, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe failed: %v exit=%d stderr=%s", err, res.ExitCode, res.Stderr)
	}
	t.Logf("probe: %s", res.Stdout)
	var out struct {
		Ifaces     []string `json:"ifaces"`
		UID        int      `json:"uid"`
		Connect    string   `json:"connect"`
		RootWrite  string   `json:"root_write"`
		RootRO     bool     `json:"root_ro"`
		TmpWrite   string   `json:"tmp_write"`
		NoNewPrivs string   `json:"nonewprivs"`
		CapEff     string   `json:"capeff"`
		UIDMap     []string `json:"uid_map"`
		Procs      int      `json:"procs"`
		APIEnv     []string `json:"api_env"`
	}
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		t.Fatalf("probe output %q: %v", res.Stdout, err)
	}
	if len(out.Ifaces) != 1 || out.Ifaces[0] != "lo" {
		t.Errorf("interfaces %v, want only lo", out.Ifaces)
	}
	if out.Connect == "connected" {
		t.Error("connecting out succeeded")
	}
	if !out.RootRO || !strings.Contains(out.RootWrite, testenv.RootWriteError()) {
		t.Errorf("writing to / gave %q", out.RootWrite)
	}
	if out.TmpWrite != "ok" {
		t.Errorf("/tmp not writable: %s", out.TmpWrite)
	}
	if out.UID == 0 {
		t.Error("running as uid 0")
	}
	if out.NoNewPrivs != "1" {
		t.Errorf("NoNewPrivs = %s", out.NoNewPrivs)
	}
	if strings.Trim(out.CapEff, "0") != "" {
		t.Errorf("CapEff = %s", out.CapEff)
	}
	// The kubelet puts the API server's address in every container's
	// environment; no process the sandbox sees (its init, PID 1, included)
	// may still show it.
	if out.Procs < 2 || len(out.APIEnv) > 0 {
		t.Errorf("of %d processes the sandbox sees, these carry the API server's address: %v", out.Procs, out.APIEnv)
	}
	// uid_map "0 <host> <n>": container root is a high host uid, never 0 or
	// 1000. A pod without hostUsers: false has none: the test cluster's
	// containerd cannot give it, and its forge.toml waives user-namespace.
	if testenv.Kube() || testenv.GVisor() { // gVisor: the Sentry's own map; TestGVisorIsolation checks the host side
		return
	}
	if len(out.UIDMap) < 3 || out.UIDMap[1] == "0" || out.UIDMap[1] == "1000" {
		t.Errorf("user namespace map %v: container users are host accounts", out.UIDMap)
	}
}

func TestMemoryHogIsOOM(t *testing.T) {
	c := testenv.NewCore(t, nil)
	_, err := run(t, c, "x = bytearray(400 * 1024 * 1024); x[::4096] = b'x' * len(x[::4096]); print('survived')",
		func(l *runtime.Limits) { l.MemoryBytes = 64 << 20 })
	var oom *sandbox.OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("want OOM error, got %v", err)
	}
	if !strings.Contains(err.Error(), "64m memory limit") {
		t.Errorf("OOM message does not name the limit: %v", err)
	}
}

func TestForkBombContained(t *testing.T) {
	c := testenv.NewCore(t, nil)
	bomb := `
import os, time
n = 0
for _ in range(10000):
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError as e:
        print("fork refused after", n, e); break
`
	res, err := run(t, c, bomb, func(l *runtime.Limits) { l.Pids = 32; l.Timeout = 20 * time.Second })
	if err != nil && !errors.As(err, new(*sandbox.TimeoutError)) {
		t.Fatalf("fork bomb run: %v", err)
	}
	if !strings.Contains(string(res.Stdout), "fork refused after") {
		t.Errorf("pids limit did not stop forking: stdout=%q", res.Stdout)
	}
	// The host is fine: another sandbox runs normally right after.
	res, err = run(t, c, "print(6*7)", nil)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "42" {
		t.Fatalf("host unusable after fork bomb: %v %q", err, res.Stdout)
	}
}

func TestTimeoutKills(t *testing.T) {
	c := testenv.NewCore(t, nil)
	start := time.Now()
	_, err := run(t, c, "import time; time.sleep(60)", func(l *runtime.Limits) { l.Timeout = 2 * time.Second })
	var te *sandbox.TimeoutError
	if !errors.As(err, &te) || te.Limit != 2*time.Second {
		t.Fatalf("want timeout error, got %v", err)
	}
	if !strings.Contains(err.Error(), "2s") {
		t.Errorf("message does not name the limit: %v", err)
	}
	// The bound runs from the container's start to the answer: how long a
	// pod takes to be scheduled depends on the cluster's load, not on the
	// kill this test is about.
	var started, stopped time.Time
	for _, e := range auditEntries(t, c.AuditLog) {
		at, _ := time.Parse(time.RFC3339Nano, e.Timestamp)
		switch {
		case e.Event == audit.ContainerStart && e.Success:
			started = at
		case e.Event == audit.ContainerStop && !e.Success && !started.IsZero():
			stopped = at
		}
	}
	if started.IsZero() || stopped.IsZero() {
		t.Fatalf("audit log lacks the run's start (%v) or its timed-out stop (%v)", started, stopped)
	}
	if d := stopped.Sub(started); d > 20*time.Second {
		t.Errorf("timeout took %s from the container's start (whole call %s)", d, time.Since(start))
	}
}

func TestRefusedBeforePodman(t *testing.T) {
	c := testenv.NewCore(t, nil)
	sess := filepath.Join(c.Base, "sessions", "s1")
	os.MkdirAll(sess, 0o755)
	os.MkdirAll(filepath.Join(c.Base, "sessions", "s2"), 0o755)
	os.Symlink("/etc", filepath.Join(sess, "escape"))
	t.Cleanup(func() { // what the test made, not a server: the base path's check counts it
		os.RemoveAll(sess)
		os.RemoveAll(filepath.Join(c.Base, "sessions", "s2"))
	})
	before, _ := c.Manager.Ours(context.Background())
	defaults := c.Manager.Policy().Settings().Defaults
	intents := map[string]policy.Intent{
		"disallowed image": {Image: "docker.io/library/alpine:latest", Command: []string{"true"}},
		"dotdot mount":     {Image: pythonImage, Mounts: []runtime.Mount{{Source: sess + "/../../../../etc", Target: "/x"}}},
		"symlink mount":    {Image: pythonImage, Mounts: []runtime.Mount{{Source: filepath.Join(sess, "escape"), Target: "/x"}}},
		"other session":    {Image: pythonImage, Mounts: []runtime.Mount{{Source: filepath.Join(c.Base, "sessions", "s2"), Target: "/x"}}},
		"podman socket":    {Image: pythonImage, Mounts: []runtime.Mount{{Source: "/run/podman/podman.sock", Target: "/x"}}},
	}
	for name, in := range intents {
		in.Plugin, in.SessionID, in.Limits = "test", "s1", defaults
		if _, err := c.Manager.Create(context.Background(), in); err == nil {
			t.Errorf("%s: created", name)
		} else if !errors.As(err, new(*policy.Violation)) {
			t.Errorf("%s: not a policy violation: %v", name, err)
		}
	}
	// A full spec asking for privileges is refused the same way.
	spec, _ := c.Manager.Policy().Harden(policy.Intent{Image: pythonImage, Limits: defaults, Plugin: "test"})
	spec.Privileged = true
	if err := c.Manager.CheckSpec(spec); err == nil {
		t.Error("privileged spec accepted")
	}
	after, _ := c.Manager.Ours(context.Background())
	if len(after) != len(before) {
		t.Errorf("a refused request reached Podman: %d containers before, %d after", len(before), len(after))
	}
	c.Audit.Close()
	raw, _ := os.ReadFile(c.AuditLog)
	crit := 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e audit.Entry
		json.Unmarshal([]byte(line), &e)
		if e.Event == audit.SecurityViolation && e.Severity == audit.Critical {
			crit++
		}
	}
	if crit != len(intents)+1 {
		t.Errorf("want %d critical violations audited, got %d:\n%s", len(intents)+1, crit, raw)
	}
}

func TestReconcileRemovesOrphans(t *testing.T) {
	var base string
	dead := testenv.NewCore(t, func(c *config.Config) { base = c.Volumes.BasePath },
		func(o *sandbox.Options) { o.ServerID = "999999999-1" })
	in := policy.Intent{Image: pythonImage, Command: []string{"sleep", "300"},
		Limits: dead.Manager.Policy().Settings().Defaults, Plugin: "test"}
	id, err := dead.Manager.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Manager.Start(context.Background(), "test", id); err != nil {
		t.Fatal(err)
	}
	_ = base
	live := testenv.NewCore(t, func(c *config.Config) { c.Volumes.BasePath = dead.Base },
		func(o *sandbox.Options) { o.Instance = "test-" + filepath.Base(dead.Base) })
	n, err := live.Manager.Reconcile(context.Background())
	if err != nil || n < 1 {
		t.Fatalf("reconcile removed %d: %v", n, err)
	}
	left, _ := live.Manager.Ours(context.Background())
	for _, c := range left {
		if c.ID == id {
			t.Fatal("orphan still present")
		}
	}
}

// A SIGKILL under a memory limit is not an OOM kill: the kernel's own record
// decides (Podman's OOMKilled is always false on cgroups v1).
func TestSIGKILLIsNotOOM(t *testing.T) {
	c := testenv.NewCore(t, nil)
	_, err := run(t, c, "import os; os.kill(os.getpid(), 9)", func(l *runtime.Limits) { l.MemoryBytes = 64 << 20 })
	var killed *sandbox.KilledError
	if !errors.As(err, &killed) || killed.Unknown {
		t.Fatalf("want a SIGKILL the kernel log clears of OOM, got %T %v", err, err)
	}
	if strings.Contains(err.Error(), "memory") || !strings.Contains(err.Error(), "signal 9") {
		t.Errorf("message %q", err)
	}
}

// The OCI runtime echoes NAME=value for a value holding a NUL byte; the
// runtime client strips the container's environment from every error.
func TestRuntimeErrorsHoldNoEnvironment(t *testing.T) {
	c := testenv.NewCore(t, nil)
	spec, err := c.Manager.Policy().Harden(policy.Intent{Image: pythonImage, Command: []string{"true"},
		Env:    map[string]string{"PLANTEDNAME_Z": "PLANTEDVALUE-1\x00PLANTEDVALUE-2"},
		Limits: c.Manager.Policy().Settings().Defaults, Plugin: "test", Instance: "test-" + filepath.Base(c.Base)})
	if err != nil {
		t.Fatal(err)
	}
	rt := podman.New(c.Config.Server.PodmanSocket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := rt.Create(ctx, spec)
	if err == nil {
		defer rt.Remove(context.Background(), id)
		err = rt.Start(ctx, id)
	}
	if err == nil {
		t.Fatal("a NUL in an environment value was accepted")
	}
	if strings.Contains(err.Error(), "PLANTED") {
		t.Fatalf("the runtime's error holds the environment: %v", err)
	}
	t.Logf("scrubbed: %v", err)
}
