package hostsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

var ctx = context.Background()

// What a plugin chooses reaches the runtime's spec bound to the plugin:
// its labels namespaced, the code hash and one-shot labels the core's own,
// mounts from its workspace, files written before the container exists.
func TestCreateSpec(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	in := intent("true")
	in.Labels = map[string]string{"kind": "session", "io.mcp-forge.owner": "core"}
	in.CodeHash = "abc123"
	in.Files = map[string][]byte{"work/main.py": []byte("print(1)")}
	in.Env = map[string]string{"K": "v"}
	in.Memory, in.CPUQuota, in.Pids, in.Timeout = "128m", 20000, 20, 30*time.Second
	c, err := r.h.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	specs := r.rt.Specs()
	if len(specs) != 1 {
		t.Fatalf("%d specs, want 1", len(specs))
	}
	s := specs[0]
	for k, want := range map[string]string{"io.mcp-forge.x-kind": "session", "io.mcp-forge.x-io.mcp-forge.owner": "core",
		runtime.LabelCodeHash: "abc123", runtime.LabelOneShot: "true"} {
		if s.Labels[k] != want {
			t.Errorf("label %s = %q, want %q (labels %v)", k, s.Labels[k], want, s.Labels)
		}
	}
	if s.Plugin != "python" {
		t.Errorf("spec owner %q, want the plugin's identity", s.Plugin)
	}
	want := runtime.Limits{MemoryBytes: 128 << 20, CPUQuota: 20000, Pids: 20, Timeout: 30 * time.Second}
	got := runtime.Limits{MemoryBytes: s.Limits.MemoryBytes, CPUQuota: s.Limits.CPUQuota, Pids: s.Limits.Pids, Timeout: s.Limits.Timeout}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("limits (-want +got):\n%s", d)
	}
	i := slices.IndexFunc(s.Mounts, func(m runtime.Mount) bool { return m.Target == "/forge/work" })
	if i < 0 || s.Mounts[i].Source != filepath.Join(r.workspaceOf(c.ID), "work") || s.Mounts[i].ReadOnly {
		t.Errorf("mounts %+v; want %s/work read-write at /forge/work", s.Mounts, r.workspaceOf(c.ID))
	}
	if b, err := os.ReadFile(filepath.Join(r.workspaceOf(c.ID), "work", "main.py")); err != nil || string(b) != "print(1)" {
		t.Errorf("intent file: %q, %v", b, err)
	}
	// A session's container is no one-shot.
	in = intent("true")
	in.SessionID = "s1"
	if _, err := r.h.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	if s := r.rt.Specs()[1]; s.Labels[runtime.LabelOneShot] != "" || s.SessionID != "s1" {
		t.Errorf("session container: labels %v, session %q", s.Labels, s.SessionID)
	}
}

// Refused creates leave nothing behind: no container, and no one-shot
// workspace.
func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name  string
		setup func(r *rig)
		in    func() host.Intent
		want  host.Kind
		msg   string
	}{
		{"memory below the minimum", nil, func() host.Intent { in := intent("true"); in.Memory = "1m"; return in }, host.KindInvalid, "minimum"},
		{"an unparsable memory size", nil, func() host.Intent { in := intent("true"); in.Memory = "lots"; return in }, host.KindInvalid, "memory"},
		{"pids over the maximum", nil, func() host.Intent { in := intent("true"); in.Pids = 1000; return in }, host.KindInvalid, "pids"},
		{"a timeout over the maximum", nil, func() host.Intent { in := intent("true"); in.Timeout = time.Hour; return in }, host.KindInvalid, "timeout"},
		{"an environment value with NUL", nil, func() host.Intent { in := intent("true"); in.Env = map[string]string{"K": "a\x00b"}; return in }, host.KindInvalid, "NUL"},
		{"a mount over /proc", nil, func() host.Intent {
			in := intent("true")
			in.Mounts = append(in.Mounts, host.Mount{Subdir: "x", Target: "/proc/self"})
			return in
		}, host.KindPolicy, "system directory"},
		{"the runtime failing", func(r *rig) { r.rt.FailNext("Create", boom) }, func() host.Intent { return intent("true") }, host.KindInternal, "boom"},
		{"Podman down", func(r *rig) { r.rt.FailNext("Image", errors.New("connect to Podman: no such file")) }, func() host.Intent { return intent("true") }, host.KindUnavailable, "Podman"},
		{"no Podman socket", func(r *rig) { r.rt.FailNext("Guarantees", errors.New("no Podman API socket found")) }, func() host.Intent { return intent("true") }, host.KindUnavailable, "socket"},
		{"the audit log unwritable", func(r *rig) { r.rec.fail(errors.New("disk full")) }, func() host.Intent { return intent("true") }, host.KindInternal, "audit log"},
		{"no room for workspaces", func(r *rig) { os.MkdirAll(r.base, 0o755); os.WriteFile(r.ws.Root(), nil, 0o644) }, func() host.Intent { return intent("true") }, host.KindInternal, "workspace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 0)
			if tc.setup != nil {
				tc.setup(r)
			}
			_, err := r.h.Create(ctx, tc.in())
			if kindOf(err) != tc.want || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Create = %v; want a %s refusal mentioning %q", err, tc.want, tc.msg)
			}
			if live := r.rt.Live(); len(live) != 0 {
				t.Errorf("containers left: %v", live)
			}
			if left := r.entries(t); len(left) != 0 {
				t.Errorf("workspaces left: %v", left)
			}
		})
	}
}

// A tool grant issued to the plugin is mounted read-only where generated
// code looks for it, with the environment that code needs; one issued to
// another plugin is refused before anything exists (grants_test.go).
func TestCreateMountsGrant(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	cfg := config.Default()
	cfg.Bridge = config.Bridge{CallTimeout: 1, MaxCallsPerRun: 10, MaxConcurrentCalls: 2}
	svc, err := toolbridge.New(cfg, "bridge", func(context.Context) (bridge.Bridge, error) { return nil, errors.New("no bridge") },
		filepath.Join(r.base, "tools"), r.rec, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	g, err := svc.Issue(ctx, toolbridge.IssueRequest{Plugin: "python", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	r.h.SetGrants(svc.Grant)
	in := intent("true")
	in.ToolsGrant = g.Token()
	in.Env = map[string]string{"PYTHONPATH": "/mine"}
	if _, err := r.h.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	s := r.rt.Specs()[0]
	i := slices.IndexFunc(s.Mounts, func(m runtime.Mount) bool { return m.Target == bridge.SandboxDir })
	if i < 0 || s.Mounts[i].Source != g.Dir() || !s.Mounts[i].ReadOnly {
		t.Fatalf("mounts %+v; want the grant %s read-only at %s", s.Mounts, g.Dir(), bridge.SandboxDir)
	}
	if s.Env[bridge.EnvSocket] == "" || !strings.HasSuffix(s.Env["PYTHONPATH"], ":/mine") {
		t.Fatalf("env %v; want the grant's socket and PYTHONPATH before the plugin's", s.Env)
	}
	// Another plugin cannot use it; a closed grant resolves for no one.
	other := r.plugin("r")
	other.SetGrants(svc.Grant)
	if _, err := other.Create(ctx, in); kindOf(err) != host.KindPolicy {
		t.Fatalf("another plugin's Create with the grant = %v; want a policy refusal", err)
	}
	g.Close()
	if _, err := r.h.Create(ctx, in); kindOf(err) != host.KindPolicy {
		t.Fatalf("Create with a closed grant = %v; want a policy refusal", err)
	}
	if n := len(r.rt.Specs()); n != 1 {
		t.Fatalf("%d specs reached the runtime; refused grants must not", n)
	}
}

// Wait and State explain how a container ended: an OOM kill, a SIGKILL
// that was none, an exit code; a runtime failure is an error.
func TestEndings(t *testing.T) {
	t.Parallel()
	oom := fmt.Sprintf("out of memory: the process was killed at the %s memory limit (exit 137); use less memory or ask for a larger limit", config.FormatSize(64<<20))
	cases := []struct {
		name    string
		end     func(r *rig, id string)
		wait    host.WaitResult
		state   host.State
		waitErr host.Kind
	}{
		{"an OOM kill", func(r *rig, id string) { r.rt.Exit(id, 137, true) },
			host.WaitResult{ExitCode: 137, OOMKilled: true, Message: oom}, host.State{ExitCode: 137, OOMKilled: true, Message: oom}, ""},
		{"a SIGKILL", func(r *rig, id string) { r.rt.Exit(id, 137, false) },
			host.WaitResult{ExitCode: 137, Message: "the process was killed by signal 9 (SIGKILL)"},
			host.State{ExitCode: 137, Message: "the process was killed by signal 9 (SIGKILL)"}, ""},
		{"an exit", func(r *rig, id string) { r.rt.Exit(id, 2, false) },
			host.WaitResult{ExitCode: 2}, host.State{ExitCode: 2, Message: "the process exited with code 2"}, ""},
		{"the runtime failing", func(r *rig, id string) { r.rt.Exit(id, 0, false); r.rt.FailNext("Wait", errors.New("engine gone")) },
			host.WaitResult{}, host.State{Message: "the process exited with code 0"}, host.KindInternal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 0)
			c := r.start(t, intent("sleep", "60"))
			tc.end(r, c.ID)
			w, err := r.h.Wait(ctx, c.ID, time.Minute)
			if kindOf(err) != tc.waitErr {
				t.Fatalf("Wait error %v; want kind %q", err, tc.waitErr)
			}
			if d := cmp.Diff(tc.wait, w); d != "" {
				t.Errorf("Wait (-want +got):\n%s", d)
			}
			st, err := r.h.State(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.state, st); d != "" {
				t.Errorf("State (-want +got):\n%s", d)
			}
		})
	}
}

// Failures of the runtime behind each operation reach the plugin as host
// errors, and the container stays the plugin's.
func TestRuntimeFailures(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	c := r.start(t, intent("sleep", "60"))
	boom := errors.New("boom")
	for _, tc := range []struct {
		method string
		call   func() error
	}{
		{"Start", func() error { return r.h.Start(ctx, c.ID) }},
		{"State", func() error { return second(r.h.State(ctx, c.ID)) }},
		{"Logs", func() error { return second(r.h.Logs(ctx, c.ID, 10)) }},
		{"Exec", func() error { return second(r.h.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"true"}})) }},
		{"Signal", func() error { return r.h.Signal(ctx, c.ID, "TERM", host.SignalInit) }},
		{"Stop", func() error { return r.h.Stop(ctx, c.ID, time.Second) }},
		{"Remove", func() error { return r.h.Remove(ctx, c.ID) }},
	} {
		r.rt.FailNext(tc.method, boom)
		if err := tc.call(); kindOf(err) != host.KindInternal || !strings.Contains(err.Error(), "boom") {
			t.Errorf("%s over a failing runtime = %v; want an internal error saying why", tc.method, err)
		}
	}
	// The failed Remove kept the container's workspace reachable.
	if err := r.h.PutFile(ctx, c.ID, "work/x", []byte("x")); err != nil {
		t.Fatalf("PutFile after a failed Remove: %v", err)
	}
	if st, err := r.h.State(ctx, c.ID); err != nil || !st.Running {
		t.Fatalf("State = %+v, %v", st, err)
	}
}

// Exec: requests reach the runtime as asked, with the output cap clamped;
// SignalAll runs kill inside; an exec timeout goes to the runtime as is.
func TestExecRequests(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	c := r.start(t, intent("sleep", "60"))
	var seen []runtime.ExecRequest
	r.rt.ExecHook = func(_ string, req runtime.ExecRequest) (runtime.ExecResult, error) {
		seen = append(seen, req)
		if req.Stdout != nil {
			req.Stdout.Write([]byte("live"))
		}
		return runtime.ExecResult{ExitCode: 0, Output: runtime.Output{Stdout: []byte("kept")}}, nil
	}
	var chunks []string
	res, err := r.h.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"python3", "-c", "1"}, Stdin: []byte("in"), Env: map[string]string{"A": "b"},
		WorkDir: "/forge/work/sub", MaxBytes: 10 << 20, Output: func(s host.Stream, d []byte) { chunks = append(chunks, string(s)+":"+string(d)) }})
	if err != nil || string(res.Stdout) != "kept" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	got := seen[0]
	want := runtime.ExecRequest{Command: []string{"python3", "-c", "1"}, Stdin: []byte("in"), Env: map[string]string{"A": "b"}, WorkDir: "/forge/work/sub", Max: host.MaxExecOutputBytes}
	got.Stdout, got.Stderr = nil, nil
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the runtime's request (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"stdout:live"}, chunks); d != "" {
		t.Errorf("Output (-want +got):\n%s", d)
	}
	// The timeout is the runtime's to enforce: the command is not wrapped
	// in anything the image would need.
	if _, err := r.h.Exec(ctx, c.ID, host.ExecRequest{Command: []string{"true"}, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if last := seen[len(seen)-1]; strings.Join(last.Command, " ") != "true" || last.Timeout != time.Second {
		t.Errorf("an exec with a timeout reached the runtime as %q, timeout %v", last.Command, last.Timeout)
	}
	if err := r.h.Signal(ctx, c.ID, "USR1", host.SignalAll); err != nil {
		t.Fatal(err)
	}
	if last := seen[len(seen)-1]; strings.Join(last.Command, " ") != "/bin/sh -c kill -s USR1 -- -1" {
		t.Errorf("SignalAll ran %q", last.Command)
	}
	if err := r.h.Signal(ctx, c.ID, "TERM", host.SignalScope(7)); kindOf(err) != host.KindInvalid {
		t.Errorf("Signal with an unknown scope = %v; want an invalid-request refusal", err)
	}
}

// Removing a container takes its one-shot workspace along, keeps a
// session's, and ends its quota watch.
func TestRemoveWorkspaces(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	one := r.start(t, intent("sleep", "60"))
	in := intent("sleep", "60")
	in.SessionID = "keep"
	sess := r.start(t, in)
	kept := filepath.Base(r.workspaceOf(sess.ID))
	for _, id := range []string{one.ID, sess.ID} {
		if err := r.h.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff([]string{kept}, r.entries(t)); d != "" {
		t.Errorf("workspaces after Remove (-want +got):\n%s", d)
	}
	// Removing again is fine; the workspace refuses another plugin.
	if err := r.h.Remove(ctx, one.ID); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := r.plugin("r").RemoveWorkspace(ctx, "keep"); kindOf(err) != host.KindNotFound {
		t.Errorf("another plugin's RemoveWorkspace = %v", err)
	}
	if err := r.h.RemoveWorkspace(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	if left := r.entries(t); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

// After a plugin crash the core releases the workspaces of its containers:
// one-shot ones, and sessions no core session keeps.
func TestCrashed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	var ws = map[string]string{}
	for _, sid := range []string{"", "kept", "dropped"} {
		in := intent("sleep", "60")
		in.SessionID = sid
		c := r.start(t, in)
		ws[sid] = filepath.Base(r.workspaceOf(c.ID))
	}
	n := r.h.Crashed(func(sid string) bool { return sid == "kept" })
	if n != 2 {
		t.Errorf("Crashed removed %d workspaces, want 2", n)
	}
	if d := cmp.Diff([]string{ws["kept"]}, r.entries(t)); d != "" {
		t.Errorf("workspaces after the crash (-want +got):\n%s", d)
	}
	if n := r.h.Crashed(func(string) bool { return false }); n != 0 {
		t.Errorf("a second Crashed removed %d", n)
	}
}

// Past the quota (watched by walking the workspace, once a second) the
// container is killed, the violation audited, and Wait and State say why.
func TestQuotaKills(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1<<10)
	c := r.start(t, intent("sleep", "60"))
	if err := r.h.PutFile(ctx, c.ID, "work/big", make([]byte, 2<<10)); err != nil {
		t.Fatal(err)
	}
	w, err := r.h.Wait(ctx, c.ID, time.Minute)
	if err != nil || !strings.Contains(w.Message, "workspace quota of "+config.FormatSize(1<<10)) {
		t.Fatalf("Wait = %+v, %v; want the quota named", w, err)
	}
	if st, _ := r.h.State(ctx, c.ID); st.Message != w.Message {
		t.Errorf("State message %q, want %q", st.Message, w.Message)
	}
	v := r.rec.find(audit.SecurityViolation)
	if len(v) != 1 || v[0].Details["rule"] != workspace.RuleQuota || v[0].Details["enforced"] != "walk" || v[0].Details["plugin"] != "python" || v[0].SessionID == "" {
		t.Fatalf("violations %+v", v)
	}
	// Within the quota nothing happens.
	c2 := r.start(t, intent("sleep", "60"))
	r.h.PutFile(ctx, c2.ID, "work/small", make([]byte, 100))
	time.Sleep(1500 * time.Millisecond)
	if st, err := r.h.State(ctx, c2.ID); err != nil || !st.Running {
		t.Fatalf("a container within its quota: %+v, %v", st, err)
	}
}

// PutFile is audited whether or not it succeeds.
func TestPutFileAudited(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	c := r.start(t, intent("sleep", "60"))
	r.h.PutFile(ctx, c.ID, "work/a", []byte("abc"))
	r.h.PutFile(ctx, c.ID, "../b", []byte("x"))
	var got []map[string]any
	for _, e := range r.rec.find(audit.WorkspaceWrite) {
		got = append(got, map[string]any{"ok": e.Success, "path": e.Details["path"], "bytes": e.Details["bytes"], "plugin": e.Details["plugin"], "failed": e.Error != ""})
	}
	want := []map[string]any{
		{"ok": true, "path": "work/a", "bytes": 3, "plugin": "python", "failed": false},
		{"ok": false, "path": "../b", "bytes": 1, "plugin": "python", "failed": true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("workspace writes audited (-want +got):\n%s", d)
	}
}

// A plugin's audit records are namespaced and attributed: it cannot pass
// them off as the core's or as another plugin's, and learns when the log
// took nothing.
func TestAuditRecord(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	a := r.h.Audit()
	for _, e := range []host.Event{
		{Event: "container.create", Severity: "critical", SessionID: "s", Success: true, Details: map[string]any{"plugin": "core", "k": 1}},
		{Event: "plugin.kernel.warm", Severity: "shouting", Error: "e"},
	} {
		if err := a.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var got []audit.Entry
	for _, e := range r.rec.e {
		if strings.HasPrefix(e.Event, "plugin.") {
			got = append(got, e)
		}
	}
	want := []audit.Entry{
		{Event: "plugin.container.create", Severity: audit.Critical, SessionID: "s", Success: true, Details: map[string]any{"plugin": "python", "k": 1}},
		{Event: "plugin.kernel.warm", Severity: audit.Info, Details: map[string]any{"plugin": "python"}, Error: "e"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("recorded (-want +got):\n%s", d)
	}
	r.rec.fail(errors.New("disk full"))
	if err := a.Record(ctx, host.Event{Event: "x"}); kindOf(err) != host.KindUnavailable || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Record into an unwritable log = %v; want unavailable", err)
	}
}

func TestAsHostErr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want host.Kind
	}{
		{host.Errorf(host.KindNotFound, "x"), host.KindNotFound},
		{fmt.Errorf("wrapped: %w", host.Errorf(host.KindTooLarge, "x")), host.KindTooLarge},
		{&policy.Violation{Rule: "r", Detail: "d"}, host.KindPolicy},
		{&policy.LimitError{Field: "memory", Msg: "m"}, host.KindInvalid},
		{errors.New("cannot connect to Podman"), host.KindUnavailable},
		{errors.New("no Podman API socket"), host.KindUnavailable},
		{errors.New("other"), host.KindInternal},
	} {
		if got := kindOf(asHostErr(tc.err)); got != tc.want {
			t.Errorf("asHostErr(%v) kind %q, want %q", tc.err, got, tc.want)
		}
	}
	if wrap(nil) != nil {
		t.Error("wrap(nil) is not nil")
	}
}

func second[T any](_ T, err error) error { return err }
