package sdktest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Snippets are the programs the conformance suite runs, in the backend's
// language, with the values they are expected to produce. The suite knows
// no language: a snippet left empty skips its check (say why in your test).
type Snippets struct {
	Language string
	Print    string // prints exactly "hello" and a newline to stdout
	Stderr   string // writes "oops" to stderr and succeeds
	// Expr is a program whose value is reported as a result: ResultJSON must
	// equal ExprJSON and ResultRepr contain ExprRepr.
	Expr, ExprJSON, ExprRepr string
	SyntaxError              string // fails to parse; SyntaxLine (if > 0) is the line reported
	SyntaxLine               int
	RuntimeError             string // fails at run time; RuntimeLine (if > 0) is the line reported
	RuntimeLine              int
	// OwnFrames are strings that must not appear in a traceback: the
	// backend's own runner ("runner" for a Python runner script).
	OwnFrames []string
	Sleep     string // runs for at least 30 seconds

	// For RunSessionBackend.
	SetState string // stores state in the session
	GetState string // prints the stored state to stdout
	StateOut string // what GetState prints (trimmed) after SetState
	// SleepAfterSet changes the state, then runs for at least 30 seconds;
	// after it is interrupted GetState prints SleptOut.
	SleepAfterSet string
	SleptOut      string
	Exit          string // ends the session's process (its state is lost)
	// CheckpointForger, for a backend that reports Checkpoint code, stores
	// a variable whose saving prints a line of its own: CheckpointMarker
	// then {"saved":["__forged__"],"created":"2099-01-01T00:00:00Z"} (as a
	// __getstate__ or an R active binding could). The save's report must
	// still be told apart.
	CheckpointForger string
	// CheckpointState is state a checkpoint must bring back beyond a plain
	// variable (an imported module, an attached package, a hidden name);
	// CheckpointGet prints CheckpointOut from it. Empty: the checkpoint step
	// uses SetState, GetState and StateOut.
	CheckpointState, CheckpointGet, CheckpointOut string
}

// Option adjusts a conformance run.
type Option func(*options)

type options struct {
	tracker *Tracker
	root    string
	another func(t *testing.T) backend.Backend
}

// WithAnotherInstance checks that a session opened in the backend can be
// resumed in another instance of it (another process of the same plugin,
// over the same host, as the plugin of another replica of the core is),
// with its state: another returns that instance. A backend that returns
// no SessionInfo.ResumeState skips the check.
func WithAnotherInstance(another func(t *testing.T) backend.Backend) Option {
	return func(o *options) { o.another = another }
}

// WithTracker checks, through a Tracker wrapped around the host the backend
// was configured with, that no container and no workspace of the backend's
// own survives a run or a closed session.
func WithTracker(tr *Tracker) Option { return func(o *options) { o.tracker = tr } }

// WithWorkspaceRoot checks that the directory holding the host's workspaces
// (LocalHost.Base, or <base>/sessions of the real core) is empty at the end,
// once the suite has removed the workspaces of the sessions it opened (as
// the core does when a session is destroyed). Needs WithTracker.
func WithWorkspaceRoot(dir string) Option { return func(o *options) { o.root = dir } }

func collect(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func need(t *testing.T, snippets ...string) {
	t.Helper()
	for _, s := range snippets {
		if s == "" {
			t.Skip("the snippets leave this check out")
		}
	}
}

// RunBackend is the conformance suite for stateless execution. Every
// backend plugin, ours or a third party's, is expected to pass it.
func RunBackend(t *testing.T, b backend.Backend, s Snippets, opts ...Option) {
	o := collect(opts)
	ctx := context.Background()
	exec := func(t *testing.T, code string, timeout time.Duration) backend.ExecuteResult {
		t.Helper()
		res, err := b.Execute(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, Timeout: timeout, MaxOutputBytes: 1 << 20})
		if err != nil {
			t.Fatalf("Execute returned a Go error for user code (failures of user code must be results): %v", err)
		}
		return res
	}
	t.Run("capabilities", func(t *testing.T) {
		c, err := b.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range c.Languages {
			found = found || l == s.Language
		}
		if !found {
			t.Fatalf("capabilities %v do not list %q", c.Languages, s.Language)
		}
	})
	t.Run("print", func(t *testing.T) {
		need(t, s.Print)
		r := exec(t, s.Print, time.Minute)
		if !r.Success || strings.TrimRight(r.Stdout, "\n") != "hello" || r.Error != nil {
			t.Fatalf("print: %+v", r)
		}
	})
	t.Run("stderr separate", func(t *testing.T) {
		need(t, s.Stderr)
		r := exec(t, s.Stderr, time.Minute)
		if !r.Success || !strings.Contains(r.Stderr, "oops") || strings.Contains(r.Stdout, "oops") {
			t.Fatalf("stderr: %+v", r)
		}
	})
	t.Run("streamed output", func(t *testing.T) {
		// A backend.StreamingBackend (the core's client of any plugin is
		// one) gives the result Execute gives; its events, if any, are the
		// program's stdout and stderr, in order, within the output cap.
		sb, ok := b.(backend.StreamingBackend)
		if !ok {
			t.Skip("not a backend.StreamingBackend")
		}
		for _, code := range []string{s.Print, s.Stderr} {
			if code == "" {
				continue
			}
			const limit = 1 << 20
			var mu sync.Mutex
			var out, errs strings.Builder
			r, err := sb.ExecuteStream(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, Timeout: time.Minute, MaxOutputBytes: limit}, func(ev backend.StreamEvent) {
				mu.Lock()
				defer mu.Unlock()
				switch ev.Name {
				case host.Stdout:
					out.WriteString(ev.Text)
				case host.Stderr:
					errs.WriteString(ev.Text)
				default:
					t.Errorf("event of stream %q", ev.Name)
				}
			})
			if err != nil {
				t.Fatalf("ExecuteStream returned a Go error for user code: %v", err)
			}
			want := exec(t, code, time.Minute)
			if r.Success != want.Success || r.Stdout != want.Stdout || r.Stderr != want.Stderr {
				t.Fatalf("ExecuteStream's result %+v is not Execute's %+v", r, want)
			}
			mu.Lock()
			if !strings.HasPrefix(r.Stdout, out.String()) || !strings.HasPrefix(r.Stderr, errs.String()) || out.Len()+errs.Len() > limit {
				t.Errorf("streamed stdout %q and stderr %q are not the result's own output %q, %q", out.String(), errs.String(), r.Stdout, r.Stderr)
			}
			mu.Unlock()
		}
	})
	t.Run("result value", func(t *testing.T) {
		need(t, s.Expr)
		r := exec(t, s.Expr, time.Minute)
		if !r.Success || r.ResultJSON != s.ExprJSON || !strings.Contains(r.ResultRepr, s.ExprRepr) {
			t.Fatalf("expression: want json %q and repr containing %q, got %+v", s.ExprJSON, s.ExprRepr, r)
		}
	})
	t.Run("syntax error", func(t *testing.T) {
		need(t, s.SyntaxError)
		r := exec(t, s.SyntaxError, time.Minute)
		if r.Success || r.Error == nil || (s.SyntaxLine > 0 && r.Error.Line != s.SyntaxLine) {
			t.Fatalf("syntax error: want failure on line %d, got %+v", s.SyntaxLine, r.Error)
		}
	})
	t.Run("runtime error", func(t *testing.T) {
		need(t, s.RuntimeError)
		r := exec(t, s.RuntimeError, time.Minute)
		if r.Success || r.Error == nil || (s.RuntimeLine > 0 && r.Error.Line != s.RuntimeLine) {
			t.Fatalf("runtime error: want failure on line %d, got %+v", s.RuntimeLine, r.Error)
		}
		checkFrames(t, r.Error, s.OwnFrames)
	})
	t.Run("timeout", func(t *testing.T) {
		need(t, s.Sleep)
		start := time.Now()
		r := exec(t, s.Sleep, 2*time.Second)
		if r.Success || r.Error == nil || r.Error.Name != "Timeout" {
			t.Fatalf("timeout: %+v", r.Error)
		}
		if time.Since(start) > 25*time.Second {
			t.Fatalf("timeout took %s", time.Since(start))
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		need(t, s.Print)
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := b.Execute(ctx, backend.ExecuteRequest{Code: s.Print, Language: s.Language, Timeout: time.Minute})
				switch {
				case err != nil:
					errs <- err.Error()
				case !r.Success || strings.TrimRight(r.Stdout, "\n") != "hello":
					errs <- fmt.Sprintf("concurrent run: want stdout \"hello\", got %+v", r)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})
	t.Run("nothing left", func(t *testing.T) { o.checkLeftovers(t, b) })
}

func checkFrames(t *testing.T, e *backend.ExecError, own []string) {
	t.Helper()
	if e == nil {
		return
	}
	for _, l := range e.Traceback {
		for _, w := range own {
			if strings.Contains(l, w) {
				t.Errorf("traceback shows the backend's own frames (%q): %q", w, l)
			}
		}
	}
}

// checkLeftovers: every container the backend made for a run is removed
// (the removal may finish just after the run returned). Containers it keeps
// ready in a warm pool (label warm=true) stay its own until it ends, but
// never more of them than its pool reports ready or starting: a pooled
// container that served a run must be gone too.
func (o options) checkLeftovers(t *testing.T, b backend.Backend) {
	t.Helper()
	if o.tracker == nil {
		t.Skip("no tracker: use sdktest.WithTracker")
	}
	var others, pooled []string
	keep := 0
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pooled = o.tracker.Pooled()
		others = others[:0]
		for _, id := range o.tracker.Containers() {
			if _, ok := o.tracker.pooledSession(id); !ok {
				others = append(others, id)
			}
		}
		keep = 0
		if sr, ok := b.(backend.StatsReporter); ok {
			if st, err := sr.Stats(context.Background()); err == nil && st.WarmPool != nil {
				keep = st.WarmPool.Warm + st.WarmPool.Starting
			}
		}
		if (len(others) == 0 && len(pooled) <= keep) || time.Now().After(deadline) {
			break
		}
	}
	if len(others) > 0 {
		t.Errorf("containers left behind: %v", others)
	}
	if len(pooled) > keep {
		t.Errorf("%d warm-pool containers left but the pool holds %d: one that served a run was not removed (%v)", len(pooled), keep, pooled)
	}
	kept := map[string]bool{}
	for _, id := range pooled {
		sid, _ := o.tracker.pooledSession(id)
		kept[sid] = true
	}
	for _, id := range o.tracker.Workspaces() {
		// Sessions opened by the suite are the core's to clean, as it does
		// on destroy; any other workspace is the backend's own leftover.
		if !o.tracker.openedBySuite(id) {
			t.Errorf("the backend left the workspace of its own session %q behind: call Sandbox.RemoveWorkspace", id)
			continue
		}
		if err := o.tracker.Sandbox().RemoveWorkspace(context.Background(), id); err != nil {
			t.Errorf("remove workspace of session %s: %v", id, err)
		}
	}
	if o.root != "" {
		entries, err := os.ReadDir(o.root)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if !kept[e.Name()] {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			t.Errorf("left under %s: %v", o.root, names)
		}
	}
}

// RunSessionBackend is the conformance suite for stateful backends (it runs
// RunBackend first): state persists between executes of one session and is
// invisible to another; a timeout interrupts and keeps the state; restart
// clears it; a session whose process ended is reported dead, as a result,
// and can be closed and opened again; closing leaves nothing behind.
func RunSessionBackend(t *testing.T, b backend.Backend, s Snippets, opts ...Option) {
	o := collect(opts)
	sb, ok := b.(backend.SessionBackend)
	if !ok {
		t.Fatalf("%T is not a backend.SessionBackend", b)
	}
	ctx := context.Background()
	t.Run("stateless", func(t *testing.T) { RunBackend(t, b, s, opts...) })
	t.Run("capabilities", func(t *testing.T) {
		c, err := b.Capabilities(ctx)
		if err != nil || !c.Stateful {
			t.Fatalf("a session backend must report Stateful: %+v %v", c, err)
		}
	})
	prefix := fmt.Sprintf("conf%d", time.Now().UnixNano()%1_000_000)
	var wsMu sync.Mutex
	workspaces := map[string]string{} // session → the workspace its containers mount
	openInfo := func(t *testing.T, id string) backend.SessionInfo {
		t.Helper()
		id = prefix + id
		if o.tracker != nil {
			o.tracker.opened(id)
		}
		info, err := sb.OpenSession(ctx, backend.OpenSessionRequest{SessionID: id})
		if err != nil {
			t.Fatalf("open session %s: %v", id, err)
		}
		if info.SessionID != id || info.Language != s.Language {
			t.Fatalf("open session: got session %s language %s, want id %s language %s", info.SessionID, info.Language, id, s.Language)
		}
		wsMu.Lock()
		workspaces[id] = cmp.Or(info.WorkspaceID, id)
		wsMu.Unlock()
		t.Cleanup(func() { sb.CloseSession(ctx, id) })
		return info
	}
	open := func(t *testing.T, id string) string { t.Helper(); return openInfo(t, id).SessionID }
	run := func(t *testing.T, id, code string, timeout time.Duration, emit func(backend.StreamEvent)) backend.ExecuteResult {
		t.Helper()
		r, err := sb.ExecuteInSession(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, SessionID: id, Timeout: timeout, MaxOutputBytes: 1 << 20}, emit)
		if err != nil {
			t.Fatalf("ExecuteInSession returned a Go error for user code (failures of user code must be results): %v", err)
		}
		return r
	}
	printed := func(t *testing.T, id, get, want string) {
		t.Helper()
		r := run(t, id, get, time.Minute, nil)
		if got := strings.TrimSpace(r.Stdout); !r.Success || got != want {
			t.Fatalf("state: want %q, got %q (%+v)", want, got, r.Error)
		}
	}
	stateIs := func(t *testing.T, id, want string) {
		t.Helper()
		printed(t, id, s.GetState, want)
	}
	t.Run("persistence and isolation", func(t *testing.T) {
		need(t, s.SetState, s.GetState, s.StateOut)
		a, other := open(t, "a"), open(t, "b")
		if r := run(t, a, s.SetState, time.Minute, nil); !r.Success {
			t.Fatalf("set state: %+v", r.Error)
		}
		stateIs(t, a, s.StateOut)
		if r := run(t, other, s.GetState, time.Minute, nil); r.Success && strings.TrimSpace(r.Stdout) == s.StateOut {
			t.Fatalf("session %s sees the state of session %s", other, a)
		}
	})
	t.Run("streamed output", func(t *testing.T) {
		need(t, s.Print)
		id := open(t, "s")
		var mu sync.Mutex
		var got strings.Builder
		r := run(t, id, s.Print, time.Minute, func(ev backend.StreamEvent) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Name != "stdout" && ev.Name != "stderr" {
				t.Errorf("stream event named %q: want stdout or stderr", ev.Name)
			}
			if ev.Name == "stdout" {
				got.WriteString(ev.Text)
			}
		})
		mu.Lock()
		defer mu.Unlock()
		if !r.Success || strings.TrimSpace(got.String()) != "hello" || strings.TrimSpace(r.Stdout) != "hello" {
			t.Fatalf("emitted %q, result %+v", got.String(), r)
		}
	})
	t.Run("user error is a result", func(t *testing.T) {
		need(t, s.RuntimeError, s.Print)
		id := open(t, "e")
		r := run(t, id, s.RuntimeError, time.Minute, nil)
		if r.Success || r.Error == nil || r.SessionDead {
			t.Fatalf("runtime error: %+v", r)
		}
		checkFrames(t, r.Error, s.OwnFrames)
		if r := run(t, id, s.Print, time.Minute, nil); !r.Success {
			t.Fatalf("the session did not survive a user error: %+v", r.Error)
		}
	})
	t.Run("timeout keeps state", func(t *testing.T) {
		need(t, s.SetState, s.GetState, s.SleepAfterSet, s.SleptOut)
		id := open(t, "t")
		run(t, id, s.SetState, time.Minute, nil)
		start := time.Now()
		r := run(t, id, s.SleepAfterSet, 2*time.Second, nil)
		if r.Success || r.Error == nil || r.Error.Name != "Timeout" || r.SessionDead {
			t.Fatalf("timeout: want a Timeout error and a live session, got %+v (dead %v)", r.Error, r.SessionDead)
		}
		if d := time.Since(start); d > 25*time.Second {
			t.Fatalf("the interrupt took %s", d)
		}
		stateIs(t, id, s.SleptOut)
	})
	t.Run("restart clears state", func(t *testing.T) {
		need(t, s.SetState, s.GetState, s.StateOut)
		id := open(t, "r")
		run(t, id, s.SetState, time.Minute, nil)
		if err := sb.RestartSession(ctx, id); err != nil {
			t.Fatalf("restart: %v", err)
		}
		if r := run(t, id, s.GetState, time.Minute, nil); r.Success && strings.TrimSpace(r.Stdout) == s.StateOut {
			t.Fatal("state survived a restart")
		}
		if r := run(t, id, s.SetState, time.Minute, nil); !r.Success {
			t.Fatalf("the restarted session does not run code: %+v", r.Error)
		}
		stateIs(t, id, s.StateOut)
	})
	t.Run("checkpoint and restore into a fresh session", func(t *testing.T) {
		set, get, want := s.SetState, s.GetState, s.StateOut
		if s.CheckpointState != "" {
			set, get, want = s.CheckpointState, s.CheckpointGet, s.CheckpointOut
		}
		need(t, set, get, want)
		c, err := b.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Checkpoint == nil {
			t.Skip("the backend reports no checkpoint code (Capabilities.Checkpoint)")
		}
		id := open(t, "k")
		if r := run(t, id, set, time.Minute, nil); !r.Success {
			t.Fatalf("set state: %+v", r.Error)
		}
		if s.CheckpointForger != "" {
			if r := run(t, id, s.CheckpointForger, time.Minute, nil); !r.Success {
				t.Fatalf("checkpoint forger: %+v", r.Error)
			}
		}
		// As the core runs them: a fresh nonce for each, only the line
		// carrying it is the report (backend.ParseCheckpointReport).
		ckpt := func(t *testing.T, id, code string) backend.CheckpointReport {
			t.Helper()
			code, nonce, err := backend.PrepareCheckpointCode(code)
			if err != nil {
				t.Fatal(err)
			}
			r := run(t, id, code, 2*time.Minute, nil)
			if !r.Success {
				t.Fatalf("checkpoint code failed: %+v\nstdout %q\nstderr %q", r.Error, r.Stdout, r.Stderr)
			}
			rep, err := backend.ParseCheckpointReport(r.Stdout, nonce)
			if err != nil {
				t.Fatalf("report: %v", err)
			}
			return rep
		}
		saved := ckpt(t, id, c.Checkpoint.Save)
		if len(saved.Saved) == 0 || slices.Contains(saved.Saved, "__forged__") {
			t.Fatalf("Save reported %+v: want the state's variable(s), never the forged name", saved)
		}
		// A new kernel: a fresh session, or the same one restarted.
		to := o.restoreTarget(t, sb, id, func() string { return open(t, "f") }, func(id string) string {
			wsMu.Lock()
			defer wsMu.Unlock()
			return workspaces[id]
		})
		if r := run(t, to, get, time.Minute, nil); r.Success && strings.TrimSpace(r.Stdout) == want {
			t.Fatal("the state is there before the restore: the restore would prove nothing")
		}
		loaded := ckpt(t, to, c.Checkpoint.Load)
		a, b := slices.Clone(saved.Saved), slices.Clone(loaded.Saved)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) || len(loaded.Skipped) != 0 {
			t.Fatalf("Load reported %+v, Save %+v: want the same names", loaded, saved)
		}
		printed(t, to, get, want)
	})
	t.Run("dead session", func(t *testing.T) {
		need(t, s.Exit, s.Print)
		id := open(t, "d")
		r := run(t, id, s.Exit, time.Minute, nil)
		if !r.SessionDead {
			// The death may be noticed only by the next execute.
			r = run(t, id, s.Print, time.Minute, nil)
		}
		if !r.SessionDead || r.Success || r.Error == nil || r.Error.Message == "" {
			t.Fatalf("want a dead-session result with a reason, got %+v", r)
		}
		if r := run(t, id, s.Print, time.Minute, nil); !r.SessionDead {
			t.Fatalf("a dead session ran code again: %+v", r)
		}
		// Recovery, as the core does it: close and open under the same id.
		if err := sb.CloseSession(ctx, id); err != nil {
			t.Fatalf("close a dead session: %v", err)
		}
		if _, err := sb.OpenSession(ctx, backend.OpenSessionRequest{SessionID: id}); err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if r := run(t, id, s.Print, time.Minute, nil); !r.Success || strings.TrimSpace(r.Stdout) != "hello" {
			t.Fatalf("reopened session: %+v", r)
		}
	})
	t.Run("resume in another instance", func(t *testing.T) {
		need(t, s.SetState, s.GetState, s.StateOut)
		if o.another == nil {
			t.Skip("no WithAnotherInstance")
		}
		info := openInfo(t, "u")
		id := info.SessionID
		if info.Resumed {
			t.Errorf("a new session (container %s) says it was resumed", info.ContainerID)
		}
		if len(info.ResumeState) == 0 {
			t.Skip("the backend returns no resume state: its sessions cannot be resumed")
		}
		if r := run(t, id, s.SetState, time.Minute, nil); !r.Success {
			t.Fatalf("set state: %+v", r.Error)
		}
		other, ok := o.another(t).(backend.SessionBackend)
		if !ok {
			t.Fatal("the other instance has no sessions")
		}
		got, err := other.OpenSession(ctx, backend.OpenSessionRequest{SessionID: id, Resume: info.ResumeState, ResumeContainer: info.ContainerID})
		if err != nil {
			t.Fatalf("resume %s in another instance: %v", id, err)
		}
		if !got.Resumed || got.ContainerID != info.ContainerID || got.SessionID != id {
			t.Fatalf("resumed as session %s in container %s (resumed %v); opened in container %s: a resume must reach the running kernel, never start one", got.SessionID, got.ContainerID, got.Resumed, info.ContainerID)
		}
		r, err := other.ExecuteInSession(ctx, backend.ExecuteRequest{Code: s.GetState, Language: s.Language, SessionID: id, Timeout: time.Minute, MaxOutputBytes: 1 << 20}, nil)
		if out := strings.TrimSpace(r.Stdout); err != nil || !r.Success || out != s.StateOut {
			t.Fatalf("state in the other instance: want %q, got %q (%+v, %v)", s.StateOut, out, r.Error, err)
		}
		if err := other.CloseSession(ctx, id); err != nil {
			t.Errorf("close %s in the other instance: %v", id, err)
		}
	})
	t.Run("unknown session is an error", func(t *testing.T) {
		_, err := sb.ExecuteInSession(ctx, backend.ExecuteRequest{Code: s.Print, Language: s.Language, SessionID: prefix + "nosuch", Timeout: time.Minute}, nil)
		var he *host.Error
		if !errors.As(err, &he) || he.Kind != host.KindNotFound {
			t.Fatalf("want a not-found host.Error, got %v", err)
		}
		if err := sb.CloseSession(ctx, prefix+"nosuch"); err != nil {
			t.Fatalf("closing an unknown session must be a no-op, got %v", err)
		}
	})
	t.Run("close leaves nothing", func(t *testing.T) {
		for _, id := range []string{"a", "b", "s", "e", "t", "r", "k", "f", "d", "u"} {
			if err := sb.CloseSession(ctx, prefix+id); err != nil {
				t.Errorf("close %s: %v", id, err)
			}
		}
		o.checkLeftovers(t, b)
	})
}

// restoreTarget readies the session a checkpoint of session from is loaded
// into and returns its id. With a Tracker, the suite can find the sessions'
// containers: a fresh session (open) gets the checkpoint file copied in, as
// the core copies a checkpoint from its store into a new session's
// workspace. Without one, from itself is restarted (its working directory,
// file included, stays): a weaker check, since the kernel is not new to
// the workspace.
func (o options) restoreTarget(t *testing.T, sb backend.SessionBackend, from string, open func() string, workspace func(session string) string) string {
	t.Helper()
	ctx := context.Background()
	if o.tracker == nil {
		if err := sb.RestartSession(ctx, from); err != nil {
			t.Fatalf("restart: %v", err)
		}
		return from
	}
	to := open()
	src, dst := o.tracker.sessionContainer(workspace(from)), o.tracker.sessionContainer(workspace(to))
	if src.id == "" || dst.id == "" {
		t.Fatalf("no container of session %s or %s went through the tracker: configure the backend with it", from, to)
	}
	h := o.tracker.Sandbox()
	data, err := h.GetFile(ctx, src.id, path.Join(src.workSubdir, backend.CheckpointFile), host.MaxFileBytes)
	if err != nil {
		t.Fatalf("read the checkpoint file of session %s: %v", from, err)
	}
	if err := h.PutFile(ctx, dst.id, path.Join(dst.workSubdir, backend.CheckpointFile), data); err != nil {
		t.Fatalf("copy the checkpoint file into session %s: %v", to, err)
	}
	return to
}
