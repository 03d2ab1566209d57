package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/session"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// state returns a session's state as list_sessions shows it.
func (r *rig) state(t *testing.T, client, id string) string {
	t.Helper()
	for _, v := range r.e.Sessions(client, false) {
		if v.ID == id {
			return v.State
		}
	}
	return "absent"
}

// waitState polls until the session reaches want (bounded).
func (r *rig) waitState(t *testing.T, client, id, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.state(t, client, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("session %s is %s, want %s", id, r.state(t, client, id), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSessionLifecycle(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	// Below the engine (plugin, workspace, audit) a session has its internal id.
	s1, s2 := session.InternalID("c1", "s1"), session.InternalID("c1", "s2")

	// create: the first call opens the kernel with the call's image and environment
	res, err := r.exec(t, Request{Language: "python", SessionID: "s1", CustomImage: "mcp-forge/custom:x", Environment: map[string]string{"K": "v"}})
	if err != nil || res.Backend != "kernel" {
		t.Fatal(res.Backend, err)
	}
	if open, ok := r.kernel.Opened(s1); !ok || open.Image != "mcp-forge/custom:x" || open.Env["K"] != "v" {
		t.Fatalf("%+v", open)
	}
	if st := r.state(t, "c1", "s1"); st != session.StateIdle {
		t.Fatal(st)
	}
	if _, err := os.Stat(r.ws.SessionPath(s1)); err != nil {
		os.MkdirAll(r.ws.SessionPath(s1), 0o700) // what a backend would have made
	}

	// later calls: the environment and image of the first call stay
	res, err = r.exec(t, Request{Language: "python", SessionID: "s1", Environment: map[string]string{"K": "w"}, CustomImage: "mcp-forge/custom:y"})
	if err != nil || len(res.Notices) != 2 || !strings.Contains(res.Notices[0], "environment applies when a session starts") || !strings.Contains(res.Notices[1], "custom_image") {
		t.Fatalf("%+v %v", res.Notices, err)
	}

	// busy while a call runs; a second call waits for the first
	release, started := make(chan struct{}), make(chan struct{}, 2)
	r.kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		started <- struct{}{}
		<-release
		return backend.ExecuteResult{Success: true, Stdout: req.Code}, nil
	}
	results := make(chan Result, 2)
	for _, code := range []string{"first", "second"} {
		go func() { res, _ := r.exec(t, Request{Language: "python", SessionID: "s1", Code: code}); results <- res }()
	}
	<-started
	r.waitState(t, "c1", "s1", session.StateBusy)
	if r.e.ReapIdle(ctx) != 0 {
		t.Fatal("a busy session was reaped")
	}
	select {
	case <-started:
		t.Fatal("two calls ran in one session at once")
	case <-time.After(50 * time.Millisecond):
	}
	release <- struct{}{}
	<-started
	release <- struct{}{}
	if a, b := <-results, <-results; !a.Success || !b.Success {
		t.Fatalf("%+v %+v", a, b)
	}
	r.waitState(t, "c1", "s1", session.StateIdle)

	// dead: the kernel dies during a call; the next call restarts it with a notice
	r.kernel.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "OutOfMemory", Message: "the kernel was killed: out of memory (512m)"}}, nil
	}
	if res, err := r.exec(t, Request{Language: "python", SessionID: "s1"}); err != nil || !res.SessionDead {
		t.Fatal(err)
	}
	v, _ := r.e.View(ctx, "c1", "s1", false)
	if v.State != session.StateDead || !strings.Contains(v.LostReason, "out of memory") {
		t.Fatalf("%+v", v)
	}
	r.kernel.Run = nil
	res, err = r.exec(t, Request{Language: "python", SessionID: "s1"})
	if err != nil || len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "was restarted before this run: the kernel was killed: out of memory") {
		t.Fatalf("%+v %v", res.Notices, err)
	}
	if open, _ := r.kernel.Opened(s1); open.Image != "mcp-forge/custom:x" || open.Env["K"] != "v" {
		t.Fatalf("a restarted kernel must start like the first: %+v", open)
	}
	if v, _ := r.e.View(ctx, "c1", "s1", false); v.State != session.StateIdle || v.LostReason != "" || v.Executions != 6 {
		t.Fatalf("%+v", v)
	}

	// restart_session clears the namespace; a dead session gets a new kernel
	if _, err := r.e.RestartSession(ctx, "c1", "s1"); err != nil {
		t.Fatal(err)
	}
	r.e.MarkBackendDead("kernel")
	if v, err := r.e.RestartSession(ctx, "c1", "s1"); err != nil || v.State != session.StateIdle {
		t.Fatalf("%+v %v", v, err)
	}
	log := r.kernel.Log()
	if i := slices.Index(log, "restart "+s1); i < 0 || !slices.Equal(log[len(log)-2:], []string{"close " + s1, "open " + s1}) {
		t.Fatalf("%v", log)
	}

	// reap: idle longer than sessions.idle_timeout
	r.e.sessions.Update(r.e.sessions.Get("c1", "s1"), func(s *session.Session) { s.LastActive = time.Now().Add(-2 * time.Hour) })
	if n := r.e.ReapIdle(ctx); n != 1 || r.state(t, "c1", "s1") != "absent" {
		t.Fatalf("reaped %d", n)
	}
	if _, err := os.Stat(r.ws.SessionPath(s1)); !os.IsNotExist(err) {
		t.Fatalf("the session's files are left: %v", err)
	}

	// destroy
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s2"}); err != nil {
		t.Fatal(err)
	}
	if err := r.e.DestroySession(ctx, "c1", "s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.View(ctx, "c1", "s2", false); !errors.Is(err, ErrNoSession) {
		t.Fatal(err)
	}
	if log := r.kernel.Log(); log[len(log)-1] != "close "+s2 {
		t.Fatalf("%v", log)
	}

	// the audit log has the whole life
	var events []string
	for _, e := range r.audit() {
		if strings.HasPrefix(e.Event, "session.") {
			events = append(events, e.Event+" "+e.SessionID+" "+e.Details["session"].(string))
		}
	}
	want := []string{"session.create " + s1 + " s1", "session.create " + s1 + " s1", "session.restart " + s1 + " s1", "session.create " + s1 + " s1",
		"session.restart " + s1 + " s1", "session.destroy " + s1 + " s1", "session.create " + s2 + " s2", "session.destroy " + s2 + " s2"}
	if !slices.Equal(events, want) {
		t.Fatalf("%v\nwant %v", events, want)
	}
}

func TestSessionFailures(t *testing.T) {
	ctx := context.Background()
	t.Run("the kernel does not start", func(t *testing.T) {
		r := newRig(t, nil, func(r *rig) { r.kernel.OpenErr = errors.New("image missing") })
		if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err == nil || !strings.Contains(err.Error(), "image missing") {
			t.Fatal(err)
		}
		if r.state(t, "c1", "s") != "absent" {
			t.Fatal("a session that never started is listed")
		}
		es := r.audit()
		if e := es[1]; e.Event != audit.SessionCreate || e.Severity != audit.Error || e.Success {
			t.Fatalf("%+v", es)
		}
	})
	t.Run("the plugin crashes", func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.exec(t, Request{Language: "python", SessionID: "s"})
		r.kernel.Run = func(context.Context, backend.ExecuteRequest, func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			return backend.ExecuteResult{}, &plugins.CrashError{Plugin: "kernel", Err: errors.New("EOF")}
		}
		if _, err := r.exec(t, Request{Language: "python", SessionID: "s"}); err == nil {
			t.Fatal("no error")
		}
		if v, _ := r.e.View(ctx, "c1", "s", false); v.State != session.StateDead || v.LostReason != "the kernel plugin crashed" {
			t.Fatalf("%+v", v)
		}
	})
	t.Run("too many sessions", func(t *testing.T) {
		r := newRig(t, func(c *config.Config) { c.Sessions.MaxConcurrent = 1 }, nil)
		r.exec(t, Request{Language: "python", SessionID: "a"})
		_, err := r.exec(t, Request{Language: "python", SessionID: "b"})
		if refusedBy(t, err) != session.RuleSessionsMax || !strings.Contains(err.Error(), "sessions.max_concurrent = 1") {
			t.Fatal(err)
		}
	})
	t.Run("another language", func(t *testing.T) {
		r := newRig(t, nil, func(r *rig) { r.pm.Add("rk", enginetest.Stateful("r")) })
		r.exec(t, Request{Language: "python", SessionID: "a"})
		_, err := r.exec(t, Request{Language: "r", SessionID: "a"})
		if refusedBy(t, err) != session.RuleSessionLanguage || !strings.Contains(err.Error(), `session "a" runs Python: run Python code in it with execute_python, or use another session_id for R code`) {
			t.Fatal(err)
		}
	})
	t.Run("document_state", func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.exec(t, Request{Language: "python", SessionID: "a"})
		note := "n"
		v, err := r.e.DocumentState(ctx, "c1", "a", map[string]string{"x": "one"}, &note, false)
		if err != nil || v.Documented["x"] != "one" || v.Note != "n" || len(v.Variables) != 1 || v.IntrospectedAt.IsZero() || len(v.Undocumented) != 0 {
			t.Fatalf("%+v %v", v, err)
		}
		_, err = r.e.DocumentState(ctx, "c1", "a", map[string]string{"": "x"}, nil, false)
		if refusedBy(t, err) != session.RuleVariableName {
			t.Fatal(err)
		}
		if v, _ := r.e.DocumentState(ctx, "c1", "a", nil, nil, true); len(v.Documented) != 0 || v.Note != "" || len(v.Undocumented) != 1 {
			t.Fatalf("clear: %+v", v)
		}
		long := strings.Repeat("x", session.MaxNoteBytes+1)
		if _, err := r.e.DocumentState(ctx, "c1", "a", nil, &long, false); refusedBy(t, err) != session.RuleStateDocsSize {
			t.Fatalf("oversized note: %v", err)
		}
		if _, err := r.e.DocumentState(ctx, "c1", "a", map[string]string{"x": long[:session.MaxDocBytes+1]}, nil, false); refusedBy(t, err) != session.RuleStateDocsSize {
			t.Fatalf("oversized description: %v", err)
		}
		many := map[string]string{}
		for i := 0; i < session.MaxDocsVariables; i++ {
			many[fmt.Sprintf("v%d", i)] = "d"
		}
		if _, err := r.e.DocumentState(ctx, "c1", "a", many, nil, false); err != nil {
			t.Fatalf("at the maximum: %v", err)
		}
		if _, err := r.e.DocumentState(ctx, "c1", "a", map[string]string{"one_more": "d"}, nil, false); refusedBy(t, err) != session.RuleStateDocsSize {
			t.Fatalf("over the maximum: %v", err)
		}
		// Replacing a documented variable's text does not count it twice.
		if _, err := r.e.DocumentState(ctx, "c1", "a", map[string]string{"v1": "new"}, nil, false); err != nil {
			t.Fatalf("redocument at the maximum: %v", err)
		}
		if v, err := r.e.DocumentState(ctx, "c1", "a", map[string]string{"v0": "", "one_more": "d"}, nil, false); err != nil || len(v.Documented) != session.MaxDocsVariables {
			t.Fatalf("remove one, add one: %d %v", len(v.Documented), err)
		}
	})
}

// Sessions are namespaced by owner: another connection (or tenant) using
// the same id gets a session of its own, and learns nothing of the other:
// every operation answers as for an id nobody has opened, with the same
// rule.
func TestSessionOwnership(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	if _, err := r.exec(t, Request{Language: "python", SessionID: "mine", Client: "a"}); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func(client, id string) error{
		"view":     func(c, id string) error { _, err := r.e.View(ctx, c, id, true); return err },
		"document": func(c, id string) error { _, err := r.e.DocumentState(ctx, c, id, nil, nil, false); return err },
		"restart":  func(c, id string) error { _, err := r.e.RestartSession(ctx, c, id); return err },
		"destroy":  func(c, id string) error { return r.e.DestroySession(ctx, c, id) },
	}
	for name, op := range ops {
		other, unknown := op("b", "mine"), op("b", "nobody")
		if !errors.Is(other, ErrNoSession) || other.Error() != strings.Replace(unknown.Error(), "nobody", "mine", 1) {
			t.Errorf("%s: %v / %v", name, other, unknown)
		}
		if refusedBy(t, other) != session.RuleSessionNotFound {
			t.Errorf("%s: another owner's session refused by %s", name, refusedBy(t, other))
		}
		if bad := op("b", "../x"); refusedBy(t, bad) != session.RuleSessionID {
			t.Errorf("%s: %v", name, bad)
		}
	}
	if len(r.e.Sessions("b", false)) != 0 || len(r.e.Sessions("a", false)) != 1 || len(r.e.Sessions("", true)) != 1 {
		t.Fatal("listing")
	}
	if r.state(t, "a", "mine") != session.StateIdle {
		t.Fatal("another connection changed the session")
	}
	rules := map[string]int{}
	for _, e := range r.audit() {
		if e.Event == EventRefused {
			rules[e.Details["rule"].(string)]++
		}
	}
	if len(rules) != 2 || rules[session.RuleSessionNotFound] != 8 || rules[session.RuleSessionID] != 4 {
		t.Fatalf("%v", rules)
	}
}

// Two owners open "main" at the same time: each gets its own kernel,
// workspace and state; destroying one leaves the other.
func TestSameIDTwoOwners(t *testing.T) {
	r := newRig(t, nil, nil)
	ctx := context.Background()
	release, started := make(chan struct{}), make(chan string, 2)
	r.kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		started <- req.SessionID
		<-release
		return backend.ExecuteResult{Success: true, Stdout: req.SessionID}, nil
	}
	errs := make(chan error, 2)
	for _, owner := range []string{"alice", "bob"} {
		go func() {
			_, err := r.exec(t, Request{Language: "python", SessionID: "main", Client: owner})
			errs <- err
		}()
	}
	// Both runs are inside their kernels at once: neither waited for the other.
	got := []string{<-started, <-started}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	a, b := session.InternalID("alice", "main"), session.InternalID("bob", "main")
	slices.Sort(got)
	want := []string{a, b}
	slices.Sort(want)
	if a == b || !slices.Equal(got, want) {
		t.Fatalf("runs went to %v, want %v", got, want)
	}
	for _, id := range []string{a, b} {
		if _, ok := r.kernel.Opened(id); !ok {
			t.Fatalf("kernel %s not open", id)
		}
		os.MkdirAll(r.ws.SessionPath(id), 0o700) // what a backend would have made
	}
	// Each owner sees its own session under its own id.
	note := "alice's"
	if _, err := r.e.DocumentState(ctx, "alice", "main", map[string]string{"x": "alice's x"}, &note, false); err != nil {
		t.Fatal(err)
	}
	if v, err := r.e.View(ctx, "bob", "main", false); err != nil || v.ID != "main" || v.Note != "" || len(v.Documented) != 0 {
		t.Fatalf("bob sees %+v %v", v, err)
	}
	for _, owner := range []string{"alice", "bob"} {
		if l := r.e.Sessions(owner, false); len(l) != 1 || l[0].ID != "main" || l[0].Executions != 1 {
			t.Fatalf("%s lists %+v", owner, l)
		}
	}
	if n := len(r.e.Sessions("", true)); n != 2 {
		t.Fatalf("%d sessions in all", n)
	}
	// Destroying bob's leaves alice's kernel, files and documentation.
	if err := r.e.DestroySession(ctx, "bob", "main"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.kernel.Opened(b); ok {
		t.Fatal("bob's kernel left open")
	}
	if _, ok := r.kernel.Opened(a); !ok {
		t.Fatal("destroying bob's session closed alice's kernel")
	}
	if _, err := os.Stat(r.ws.SessionPath(b)); !os.IsNotExist(err) {
		t.Fatalf("bob's files are left: %v", err)
	}
	if _, err := os.Stat(r.ws.SessionPath(a)); err != nil {
		t.Fatalf("alice's files: %v", err)
	}
	if v, err := r.e.View(ctx, "alice", "main", false); err != nil || v.Note != "alice's" || v.Documented["x"] != "alice's x" {
		t.Fatalf("alice sees %+v %v", v, err)
	}
	if _, err := r.e.View(ctx, "bob", "main", false); refusedBy(t, err) != session.RuleSessionNotFound {
		t.Fatal(err)
	}
	// The audit log names each session by its internal id, with the user's id beside it.
	for _, e := range r.audit() {
		if e.Event == audit.SessionCreate || e.Event == audit.SessionDestroy || e.Event == audit.ExecutionRequest {
			if want := session.InternalID(e.UserID, "main"); e.SessionID != want || e.Details["session"] != "main" {
				t.Errorf("%s of %s: session_id %q, details.session %v; want %q, main", e.Event, e.UserID, e.SessionID, e.Details["session"], want)
			}
		}
	}
}

// The internal id fits workspace.SessionIDPattern (and so the socket path
// limit) for every valid user id, and differs by owner and by id.
func TestInternalID(t *testing.T) {
	long := strings.Repeat("x", 47)
	for _, id := range []string{"a", "main", "a-b_c", "Z" + long, long + "9", "0" + strings.Repeat("-", 47), strings.Repeat("q", workspace.MaxSessionID)} {
		for _, owner := range []string{"", "conn-1", "tenant:alice", strings.Repeat("o", 300)} {
			in := session.InternalID(owner, id)
			if err := workspace.CheckSessionID(in); err != nil || len(in) > 48 {
				t.Fatalf("session.InternalID(%q, %q) = %q (%d): %v", owner, id, in, len(in), err)
			}
			if session.InternalID(owner, id) != in {
				t.Fatal("not stable")
			}
		}
	}
	if session.InternalID("a", "main") == session.InternalID("b", "main") || session.InternalID("a", "x"+long) == session.InternalID("a", "y"+long) ||
		session.InternalID("a", long+"1") == session.InternalID("a", long+"2") {
		t.Fatal("internal ids collide")
	}
	if !strings.HasPrefix(session.InternalID("conn-1", "main"), "main-") {
		t.Fatal("the user's id should stay readable")
	}
}

func TestCloseAll(t *testing.T) {
	r := newRig(t, nil, nil)
	for _, id := range []string{"a", "b"} {
		r.exec(t, Request{Language: "python", SessionID: id})
	}
	r.e.CloseAll(context.Background())
	if n := len(r.e.Sessions("", true)); n != 0 {
		t.Fatal(n)
	}
	if _, ok := r.kernel.Opened(session.InternalID("c1", "a")); ok {
		t.Fatal("kernel a left open")
	}
}

// Destroy and restart do not wait for the code a session runs: they
// interrupt it, and destroy closes a kernel that ignores the interrupt.
func TestDestroyAndRestartInterruptRunningCode(t *testing.T) {
	old := ClaimGrace
	ClaimGrace = 200 * time.Millisecond
	t.Cleanup(func() { ClaimGrace = old })
	cases := []struct {
		name      string
		obeys     bool // the code stops on interrupt
		restart   bool
		wantEvent string
	}{
		{"destroy interrupts", true, false, "interrupt"},
		{"destroy closes a kernel that ignores the interrupt", false, false, "close"},
		{"restart interrupts", true, true, "restart"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, nil)
			if _, err := r.exec(t, Request{Language: "python", SessionID: "a"}); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var once sync.Once
			end := func(string) { once.Do(func() { close(stop) }) }
			if tc.obeys {
				r.kernel.OnInterrupt = end
			}
			r.kernel.OnClose = end
			started := make(chan struct{})
			r.kernel.Run = func(ctx context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
				close(started)
				select {
				case <-stop:
					return backend.ExecuteResult{Error: &backend.ExecError{Name: "KeyboardInterrupt"}}, nil
				case <-time.After(time.Minute):
					return backend.ExecuteResult{Success: true}, nil
				}
			}
			done := make(chan error, 1)
			go func() {
				_, err := r.exec(t, Request{Language: "python", SessionID: "a", Code: "while True: pass"})
				done <- err
			}()
			<-started
			begin := time.Now()
			var err error
			if tc.restart {
				_, err = r.e.RestartSession(context.Background(), "c1", "a")
			} else {
				err = r.e.DestroySession(context.Background(), "c1", "a")
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(begin); d > 10*time.Second {
				t.Fatalf("took %s: it waited for the running code", d)
			}
			<-done
			if log := strings.Join(r.kernel.Log(), ","); !strings.Contains(log, "interrupt") || !strings.Contains(log, tc.wantEvent) {
				t.Fatalf("events %s", log)
			}
		})
	}
}
