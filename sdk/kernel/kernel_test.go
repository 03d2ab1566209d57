package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

var ctx = context.Background()

func testSpec() Spec {
	return Spec{Language: "python", DefaultImage: "mcp-forge/python:3.11", Command: IPyKernelCommand,
		Env: map[string]string{"MPLBACKEND": "Agg"}, InspectCode: "inspect", ResetCode: "reset",
		ErrorLine: func(string, string, []string) int { return 3 }}
}

// newBackend builds a backend over h; cfg is its JSON configuration.
func newBackend(t *testing.T, h *fakeHost, spec Spec, cfg string) *Backend {
	t.Helper()
	b, err := New(spec)(h, backend.Config(cfg))
	if err != nil {
		t.Fatal(err)
	}
	kb := b.(*Backend)
	t.Cleanup(func() {
		kb.Drain()
		kb.mu.Lock()
		var ids []string
		for id := range kb.sessions {
			ids = append(ids, id)
		}
		kb.mu.Unlock()
		for _, id := range ids {
			kb.CloseSession(ctx, id)
		}
	})
	return kb
}

func open(t *testing.T, b *Backend, req backend.OpenSessionRequest) backend.SessionInfo {
	t.Helper()
	info, err := b.OpenSession(ctx, req)
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	return info
}

func kindOf(err error) host.Kind {
	var he *host.Error
	if errors.As(err, &he) {
		return he.Kind
	}
	return ""
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  string
		size int
		err  string
	}{
		{"", 1, ""},
		{`{"image":"mcp-forge/custom:1"}`, 0, ""},
		{`{"image":"mcp-forge/custom:1","warm":2}`, 2, ""},
		{`{"warm":0}`, 0, ""},
		{`{"warm":-1}`, 0, "warm = -1"},
		{`{"warm":65}`, 0, "warm = 65"},
		{`{"warm":`, 0, "config"},
	} {
		b, err := New(testSpec())(newFakeHost(t).set2(func(h *fakeHost) { h.createErr = errors.New("no containers here") }), backend.Config(tc.cfg))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("config %s: %v; want an error with %q", tc.cfg, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("config %s: %v", tc.cfg, err)
		}
		kb := b.(*Backend)
		kb.mu.Lock()
		size := kb.pool.size
		kb.mu.Unlock()
		kb.Drain()
		if size != tc.size {
			t.Errorf("config %s: a pool of %d, want %d", tc.cfg, size, tc.size)
		}
		caps, err := kb.Capabilities(ctx)
		if err != nil || caps.Languages[0] != "python" || !caps.Stateful || !caps.Interrupt {
			t.Errorf("config %s: capabilities %+v, %v", tc.cfg, caps, err)
		}
	}
}

func (h *fakeHost) set2(f func(h *fakeHost)) *fakeHost { h.set(f); return h }

// A session's kernel runs in a container made as the session asked, with
// the spec's environment under the request's; executes give results,
// errors and aborts; the session closes with its container.
func TestSession(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s1", Memory: "1g", Env: map[string]string{"MPLBACKEND": "svg", "K": "v"}, ToolsGrant: "g"})
	if info.SessionID != "s1" || info.ContainerID == "" || info.Language != "python" || info.WorkspaceID != "" {
		t.Errorf("SessionInfo %+v", info)
	}
	intents, _, _, _, _ := h.snapshot()
	in := intents[0]
	if in.Image != "mcp-forge/python:3.11" || in.Memory != "1g" || in.ToolsGrant != "g" || in.SessionID != "s1" || in.WorkDir != workDir {
		t.Errorf("intent %+v", in)
	}
	if d := cmp.Diff(map[string]string{"MPLBACKEND": "svg", "K": "v"}, in.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if d := cmp.Diff(IPyKernelCommand(kernelDir+"/kernel.json"), in.Command); d != "" {
		t.Errorf("command (-want +got):\n%s", d)
	}
	if _, err := b.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s1"}); kindOf(err) != host.KindInvalid {
		t.Errorf("a second OpenSession of s1 = %v", err)
	}

	var streamed []backend.StreamEvent
	res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "x = 1"}, func(e backend.StreamEvent) { streamed = append(streamed, e) })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || res.Stdout != "x = 1\n" || res.ResultRepr != "42" || res.ResultJSON != "42" || res.Error != nil || res.ExitCode != 0 {
		t.Errorf("ok execute: %+v", res)
	}
	if d := cmp.Diff([]backend.StreamEvent{{Name: "stdout", Text: "x = 1\n"}}, streamed); d != "" {
		t.Errorf("streamed (-want +got):\n%s", d)
	}
	res, err = b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "error"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantErr := &backend.ExecError{Name: "ZeroDivisionError", Message: "division by zero", Traceback: []string{"Traceback", "line 3"}, Line: 3}
	if d := cmp.Diff(wantErr, res.Error); d != "" || res.Success || res.ExitCode != 1 || res.Stderr != "Traceback\nline 3\n" {
		t.Errorf("error execute (-want +got):\n%s%+v", d, res)
	}
	res, _ = b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "abort"}, nil)
	if res.Error == nil || res.Error.Name != "Aborted" || res.ExitCode != 1 {
		t.Errorf("aborted execute: %+v", res)
	}
	if _, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "nope", Code: "1"}, nil); kindOf(err) != host.KindNotFound {
		t.Errorf("execute in no session = %v", err)
	}

	vars, err := b.Inspect(ctx, "s1")
	want := []backend.Variable{{Name: "x", Type: "int", Size: 28, Repr: "41", Details: map[string]any{"k": float64(1)}}}
	if d := cmp.Diff(want, vars); err != nil || d != "" {
		t.Errorf("Inspect (-want +got):\n%s%v", d, err)
	}
	if err := b.RestartSession(ctx, "s1"); err != nil {
		t.Errorf("RestartSession: %v", err)
	}
	k := h.kernelOf(info.ContainerID)
	k.mu.Lock()
	codes := append([]string(nil), k.codes...)
	k.mu.Unlock()
	if d := cmp.Diff([]string{"x = 1", "error", "abort", "inspect", "reset"}, codes); d != "" {
		t.Errorf("the kernel ran (-want +got):\n%s", d)
	}
	if err := b.CloseSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if live := h.live(); len(live) != 0 {
		t.Errorf("containers after CloseSession: %v", live)
	}
	if err := b.CloseSession(ctx, "s1"); err != nil {
		t.Errorf("closing a closed session: %v", err)
	}
	if _, err := b.Inspect(ctx, "s1"); kindOf(errors.Unwrap(err)) != host.KindNotFound {
		t.Errorf("Inspect of a closed session = %v", err)
	}
}

// Introspection that prints no marker, or no JSON after it, is an error.
func TestInspectErrors(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]string{"silent": "printed nothing", "inspect-bad": "introspection output", "error": "ZeroDivisionError: division by zero"} {
		h := newFakeHost(t)
		spec := testSpec()
		spec.InspectCode = code
		b := newBackend(t, h, spec, `{"warm":0}`)
		open(t, b, backend.OpenSessionRequest{SessionID: "s"})
		if _, err := b.Inspect(ctx, "s"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Inspect with %q = %v; want %q", code, err, want)
		}
	}
}

// A timeout interrupts the kernel, over the control channel or, for a
// kernel that ignores it, by SIGINT: the session survives.
func TestTimeoutInterrupts(t *testing.T) {
	t.Parallel()
	for _, bySignal := range []bool{false, true} {
		h := newFakeHost(t)
		spec := testSpec()
		spec.InterruptBySignal = bySignal
		b := newBackend(t, h, spec, `{"warm":0}`)
		info := open(t, b, backend.OpenSessionRequest{SessionID: "s"})
		res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s", Code: "sleep", Timeout: 200 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Error == nil || res.Error.Name != "Timeout" || res.SessionDead || !strings.Contains(res.Error.Message, "state is kept") || res.Stdout != "started\n" {
			t.Errorf("by signal %v: %+v", bySignal, res)
		}
		_, _, _, signals, _ := h.snapshot()
		if got := hasPrefix(signals, info.ContainerID+":INT"); got != bySignal {
			t.Errorf("by signal %v: signals %v", bySignal, signals)
		}
		if res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s", Code: "after"}, nil); err != nil || !res.Success {
			t.Errorf("by signal %v: the session after the interrupt: %+v, %v", bySignal, res, err)
		}
		// Interrupt from the API reaches an idle kernel harmlessly.
		if err := b.Interrupt(ctx, "s"); err != nil {
			t.Errorf("Interrupt: %v", err)
		}
	}
	if err := newBackend(t, newFakeHost(t), testSpec(), `{"warm":0}`).Interrupt(ctx, "none"); kindOf(err) != host.KindNotFound {
		t.Errorf("Interrupt of no session = %v", err)
	}
}

// A kernel deaf to interrupts is stopped 10 s after its timeout: the
// session is dead, and says so to every later call.
func TestTimeoutDeafKernel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits out the 10 s interrupt grace")
	}
	h := newFakeHost(t)
	h.deaf = true
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s"})
	res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s", Code: "sleep", Timeout: 100 * time.Millisecond}, nil)
	if err != nil || !res.SessionDead || res.Error == nil || res.Error.Name != "Timeout" || res.ExitCode != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	_, removed, _, signals, _ := h.snapshot()
	if d := cmp.Diff([]string{info.ContainerID}, removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d)
	}
	if !hasPrefix(signals, info.ContainerID+":INT") {
		t.Errorf("no SIGINT after the interrupt_request went unanswered: %v", signals)
	}
	res, err = b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s", Code: "1"}, nil)
	if err != nil || !res.SessionDead || res.Error.Name != "SessionDead" {
		t.Errorf("execute in a dead session: %+v, %v", res, err)
	}
	if _, err := b.Inspect(ctx, "s"); err == nil || !strings.Contains(err.Error(), "dead") {
		t.Errorf("Inspect of a dead session = %v", err)
	}
	if err := b.CloseSession(ctx, "s"); err != nil {
		t.Errorf("CloseSession of a dead session: %v", err)
	}
}

// A kernel whose container ends mid-execute (here an OOM kill) is noticed
// by polling the container: the session is dead, with the output so far.
func TestKernelDeath(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s"})
	res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s", Code: "die", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.SessionDead || res.Error == nil || res.Error.Name != "OutOfMemory" || !strings.Contains(res.Error.Message, "out of memory") {
		t.Errorf("%+v", res)
	}
	if _, removed, _, _, _ := h.snapshot(); len(removed) != 1 || removed[0] != info.ContainerID {
		t.Errorf("removed %v", removed)
	}
}

// A cancelled call interrupts the kernel and returns the context's error.
func TestExecuteCancelled(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s"})
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.ExecuteInSession(cctx, backend.ExecuteRequest{SessionID: "s", Code: "sleep"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("= %v; want the context's error", err)
	}
	k := h.kernelOf(info.ContainerID)
	k.mu.Lock()
	n := k.interrupts
	k.mu.Unlock()
	if n != 1 {
		t.Errorf("%d interrupts, want 1", n)
	}
}

// The socket paths are the sandbox's and the core's business: a session id
// far over what a socket path on the host holds opens and runs.
func TestLongSessionID(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	sid := strings.Repeat("x", 120)
	open(t, b, backend.OpenSessionRequest{SessionID: sid})
	r, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: sid, Code: "hello"}, nil)
	if err != nil || r.Stdout != "hello\n" {
		t.Fatalf("execute = %+v, %v", r, err)
	}
}

// Starts that fail leave no container behind, and say why, with the
// kernel's own output where there is some.
func TestOpenFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  func(h *fakeHost)
		sid  string
		want string
	}{
		{"create refused", func(h *fakeHost) { h.createErr = host.Errorf(host.KindPolicy, "image not allowed") }, "s", "image not allowed"},
		{"start failing", func(h *fakeHost) { h.startErr = errors.New("no engine") }, "s", "no engine; kernel output: ModuleNotFoundError: ipykernel"},
		{"the kernel exiting", func(h *fakeHost) { h.noKernel = true }, "s", "the python kernel exited while starting: the process exited with code 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost(t)
			if tc.set != nil {
				h.set(tc.set)
			}
			b := newBackend(t, h, testSpec(), `{"warm":0}`)
			_, err := b.OpenSession(ctx, backend.OpenSessionRequest{SessionID: tc.sid})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenSession = %v; want %q", err, tc.want)
			}
			if live := h.live(); len(live) != 0 {
				t.Errorf("containers left: %v", live)
			}
			// The reservation is released: the id can be opened again.
			h.set(func(h *fakeHost) { h.createErr, h.startErr, h.noKernel = nil, nil, false })
			if len(tc.sid) < 20 {
				open(t, b, backend.OpenSessionRequest{SessionID: tc.sid})
			}
		})
	}
}

// A stateless run is a throw-away session whose container and workspace
// go when it ends.
func TestStatelessExecute(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), `{"warm":0}`)
	res, err := b.Execute(ctx, backend.ExecuteRequest{Code: "print(2)", Memory: "256m"})
	if err != nil || !res.Success || res.Stdout != "print(2)\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	intents, removed, removedWS, _, _ := h.snapshot()
	if len(intents) != 1 || !strings.HasPrefix(intents[0].SessionID, "t") || intents[0].Memory != "256m" {
		t.Fatalf("intents %+v", intents)
	}
	if len(removed) != 1 || len(removedWS) != 1 || removedWS[0] != intents[0].SessionID {
		t.Errorf("removed %v, workspaces %v", removed, removedWS)
	}
	if _, err := os.Stat(h.base + "/" + intents[0].SessionID); !os.IsNotExist(err) {
		t.Errorf("the run's workspace stayed: %v", err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// The warm pool: a matching new session takes a pre-started kernel (and
// its workspace, named by the pool id) and another starts behind it; a
// session that does not match starts cold; a warm kernel that died is
// retired rather than handed over.
func TestWarmPool(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), "")
	warm := func(n int) func() bool {
		return func() bool { p := b.Pool(); return p != nil && p.Warm == n && p.Starting == 0 }
	}
	waitFor(t, "a warm kernel", warm(1))
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s1"})
	if !strings.HasPrefix(info.WorkspaceID, poolIDPrefix) || info.SessionID != "s1" {
		t.Fatalf("a warm kernel's SessionInfo %+v", info)
	}
	if res, err := b.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "1"}, nil); err != nil || !res.Success {
		t.Fatalf("execute on a warm kernel: %+v, %v", res, err)
	}
	waitFor(t, "the refill", warm(1))
	cold := open(t, b, backend.OpenSessionRequest{SessionID: "s2", Memory: "1g"})
	if cold.WorkspaceID != "" {
		t.Errorf("a session asking for memory took a warm kernel: %+v", cold)
	}
	open(t, b, backend.OpenSessionRequest{SessionID: "s3", WorkspaceID: "s3"}) // a restart: no miss
	// The next warm kernel dies while it waits.
	b.mu.Lock()
	dead := b.pool.warm[""][0]
	b.mu.Unlock()
	h.kernelOf(dead.ctr).stop()
	info = open(t, b, backend.OpenSessionRequest{SessionID: "s4"})
	p := b.Pool()
	// The dead kernel's replacement starts as it is taken, and may be
	// ready by the time the heartbeat gave up on it: then s4 takes that.
	want := backend.WarmPool{Size: 1, Hits: 1, Misses: 2, Retired: 1}
	if info.WorkspaceID != "" {
		want.Hits, want.Misses = 2, 1
	}
	got := backend.WarmPool{Size: p.Size, Hits: p.Hits, Misses: p.Misses, Retired: p.Retired}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pool counters (-want +got):\n%s", d)
	}
	if p.Refills < 2 || p.MeanRefill <= 0 {
		t.Errorf("refills %d, mean %s", p.Refills, p.MeanRefill)
	}
	_, removed, removedWS, _, events := h.snapshot()
	if !hasPrefix(removed, dead.ctr) || !hasPrefix(removedWS, dead.id) {
		t.Errorf("the dead warm kernel was not discarded: removed %v, workspaces %v", removed, removedWS)
	}
	if len(events) < 2 || events[0].Event != "kernel.warm" {
		t.Errorf("audit events %+v", events)
	}
	if st, _ := b.Stats(ctx); st.WarmPool == nil || st.WarmPool.Size != 1 {
		t.Errorf("the pool in Stats: %+v", st.WarmPool)
	}
	waitFor(t, "the refill", warm(1))
	b.Drain()
	if p := b.Pool(); p == nil || p.Size != 0 || p.Warm != 0 {
		t.Errorf("after Drain: %+v", p)
	}
}

// Failed warm starts back off and are counted; their workspaces go.
func TestWarmPoolFailures(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.createErr = errors.New("engine down")
	b := newBackend(t, h, testSpec(), `{"warm":2}`)
	waitFor(t, "two failures", func() bool { p := b.Pool(); return p.Failures == 2 && p.Starting == 0 })
	p := b.Pool()
	if p.LastFailure != "engine down" || p.Warm != 0 {
		t.Errorf("pool %+v", p)
	}
	b.fill() // backing off: starts nothing
	if p := b.Pool(); p.Starting != 0 {
		t.Errorf("fill during the back-off started %d", p.Starting)
	}
	_, _, removedWS, _, _ := h.snapshot()
	if len(removedWS) != 2 || !strings.HasPrefix(removedWS[0], poolIDPrefix) {
		t.Errorf("workspaces removed %v", removedWS)
	}
	// No warm kernel: a session starts cold, counted as a miss.
	h.set(func(h *fakeHost) { h.createErr = nil })
	open(t, b, backend.OpenSessionRequest{SessionID: "s"})
	if p := b.Pool(); p.Misses != 1 {
		t.Errorf("misses %d", p.Misses)
	}
	// After the back-off the pool fills.
	waitFor(t, "the pool after the back-off", func() bool { p := b.Pool(); return p.Warm == 2 })
}

// A session's kernel is reached again from another backend instance (the
// plugin of another replica of the core) with the state the first one
// returned: the same kernel, nothing started. A state that is not the
// kernel's (another key), garbage, or a stopped container fails, and
// never starts a fresh kernel in its place.
func TestResume(t *testing.T) {
	resumeTimeout = time.Second // the wrong key's wait
	t.Parallel()
	h := newFakeHost(t)
	first := newBackend(t, h, testSpec(), `{"warm":0}`)
	info := open(t, first, backend.OpenSessionRequest{SessionID: "s1"})
	if len(info.ResumeState) == 0 || info.Resumed {
		t.Fatalf("SessionInfo of a new session %+v", info)
	}
	if _, err := first.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "x = 1"}, nil); err != nil {
		t.Fatal(err)
	}
	// The first instance is lost without closing anything.
	s, _ := first.get("s1")
	s.client.Close()
	first.mu.Lock()
	delete(first.sessions, "s1")
	first.mu.Unlock()

	forged := func(f func(*resumeState)) []byte {
		var st resumeState
		if err := json.Unmarshal(info.ResumeState, &st); err != nil {
			t.Fatal(err)
		}
		f(&st)
		b, _ := json.Marshal(st)
		return b
	}
	for _, tc := range []struct {
		name      string
		req       backend.OpenSessionRequest
		kind      host.Kind
		errSubstr string
	}{
		{"garbage", backend.OpenSessionRequest{SessionID: "s1", Resume: []byte("{"), ResumeContainer: info.ContainerID}, host.KindInvalid, "not one this python backend wrote"},
		{"another version", backend.OpenSessionRequest{SessionID: "s1", Resume: forged(func(s *resumeState) { s.Version = 2 }), ResumeContainer: info.ContainerID}, host.KindInvalid, "version 1"},
		{"no container", backend.OpenSessionRequest{SessionID: "s1", Resume: info.ResumeState}, host.KindInvalid, "needs the container"},
		{"another session's state", backend.OpenSessionRequest{SessionID: "s2", Resume: info.ResumeState, ResumeContainer: info.ContainerID}, host.KindInvalid, "is of session s1"},
		{"another container", backend.OpenSessionRequest{SessionID: "s1", Resume: info.ResumeState, ResumeContainer: "c9"}, host.KindInvalid, "not of container c9"},
		{"another key", backend.OpenSessionRequest{SessionID: "s1", Resume: forged(func(s *resumeState) { s.Connection.Key = strings.Repeat("0", 64) }), ResumeContainer: info.ContainerID}, host.KindUnavailable, "did not answer"},
	} {
		second := newBackend(t, h, testSpec(), `{"warm":0}`)
		_, err := second.OpenSession(ctx, tc.req)
		if kindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
			t.Errorf("%s: OpenSession = %v; want %v with %q", tc.name, err, tc.kind, tc.errSubstr)
		}
		if _, err := second.get(tc.req.SessionID); err == nil {
			t.Errorf("%s: a failed resume left a session", tc.name)
		}
	}

	resumeTimeout = time.Minute // the real one's: a loaded machine may be slow
	second := newBackend(t, h, testSpec(), `{"warm":0}`)
	got, err := second.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s1", Resume: info.ResumeState, ResumeContainer: info.ContainerID})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Resumed || got.ContainerID != info.ContainerID || got.SessionID != "s1" || string(got.ResumeState) != string(info.ResumeState) {
		t.Errorf("resumed SessionInfo %+v; opened as %+v", got, info)
	}
	// The kernel is not taken twice, under the same id or another.
	if _, err := second.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s1", Resume: info.ResumeState, ResumeContainer: info.ContainerID}); kindOf(err) != host.KindInvalid {
		t.Errorf("a second resume of s1 = %v", err)
	}
	other := forged(func(s *resumeState) { s.Session = "s3" })
	if _, err := second.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s3", Resume: other, ResumeContainer: info.ContainerID}); kindOf(err) != host.KindInvalid || !strings.Contains(err.Error(), "already serves session s1") {
		t.Errorf("a resume of s1's kernel as s3 = %v", err)
	}
	if res, err := second.ExecuteInSession(ctx, backend.ExecuteRequest{SessionID: "s1", Code: "y = 2"}, nil); err != nil || !res.Success {
		t.Fatalf("execute after the resume: %+v, %v", res, err)
	}
	intents, _, _, _, _ := h.snapshot()
	if len(intents) != 1 {
		t.Errorf("%d containers created; a resume creates none", len(intents))
	}
	k := h.kernelOf(info.ContainerID)
	k.mu.Lock()
	codes := append([]string(nil), k.codes...)
	k.mu.Unlock()
	if d := cmp.Diff([]string{"x = 1", "y = 2"}, codes); d != "" {
		t.Errorf("the one kernel ran (-want +got):\n%s", d)
	}

	// A kernel whose container stopped is not resumed.
	h.set(func(h *fakeHost) { h.ctrs[info.ContainerID].running = false })
	third := newBackend(t, h, testSpec(), `{"warm":0}`)
	if _, err := third.OpenSession(ctx, backend.OpenSessionRequest{SessionID: "s1", Resume: info.ResumeState, ResumeContainer: info.ContainerID}); kindOf(err) != host.KindUnavailable || !strings.Contains(err.Error(), "state is lost") {
		t.Errorf("resume in a stopped container = %v", err)
	}
}

// The start-up code goes on the kernel's command line without its comment
// and blank lines, its code lines whole and indented as they were.
func TestUncommented(t *testing.T) {
	cases := []struct{ in, want string }{
		{"# why\ndef f():\n    # inside\n    x = '# kept'\n\n    return x  # kept too\nf()\n", "def f():\n    x = '# kept'\n    return x  # kept too\nf()\n"},
		{"options(a = 1)", "options(a = 1)\n"},
		{"# only\n\n", ""},
	}
	for _, c := range cases {
		if got := uncommented(c.in); got != c.want {
			t.Errorf("uncommented(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, cmd := range [][]string{IPyKernelCommand("c"), IRKernelCommand("c")} {
		if s := strings.Join(cmd, " "); !strings.Contains(s, "post_run_cell") && !strings.Contains(s, "displaylist") {
			t.Errorf("%q has no start-up code", cmd)
		}
	}
}
