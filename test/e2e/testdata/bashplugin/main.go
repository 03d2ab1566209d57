// A third-party stateful backend on the public SDK only: one bash per session
// sources every snippet, so `export X=1` in one call is seen by `echo $X` in
// the next; a timeout interrupts the snippet and keeps the shell's state.
package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// The session's container runs loop: one bash that reads a run number n
// from the fifo "in", sources the snippet c<n> with its output in o<n> and
// e<n>, and writes the exit status to r<n> (written aside, then renamed, so
// that r<n> existing means it is complete). Sourcing, not running, is what
// keeps variables across runs. SIGINT ends only the snippet being sourced
// (trap 'return 130'), never the loop.
const loop = `trap : INT; mkfifo in; exec 3<>in; while IFS= read -r n <&3; do
trap 'return 130' INT; . ./c$n >o$n 2>e$n; echo $? >r$n.t; trap : INT; mv r$n.t r$n; done`

// wait streams o<n> as it grows until r<n> appears ($1 is n).
const wait = `(until [ -e r$1 ]; do sleep 0.02; done) & tail -s 0.05 -n +1 -F --pid=$! o$1 2>/dev/null`

// submit writes the snippet (stdin) to c<n> and hands n to the loop; right
// after the container starts the fifo may not exist yet.
const submit = `cat >c$1; until [ -p in ]; do sleep 0.01; done; echo $1 >in`

// collect prints a finished run's output, removes its files and exits
// with its status.
const collect = `cat o$1; cat e$1 >&2; rc=$(cat r$1); rm -f c$1 o$1 e$1 r$1; exit $rc`

var caps = backend.Capabilities{Languages: []string{"bash"}, Stateful: true, Interrupt: true}

type session struct {
	mu   sync.Mutex // one run at a time: the loop reads one number at a time
	req  backend.OpenSessionRequest
	ctr  string // the container
	dead string // why the session ended; "" while it lives
	n    int    // the last run's number
}

type bash struct {
	sb       host.Sandbox
	sessions sync.Map // id → *session
}

func (b *bash) Capabilities(context.Context) (backend.Capabilities, error) { return caps, nil }

// Execute runs code in a throw-away session, removed with its workspace.
func (b *bash) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	req.SessionID = fmt.Sprintf("b%x", rand.Uint64())
	if _, err := b.OpenSession(ctx, backend.OpenSessionRequest{SessionID: req.SessionID, Image: req.Image, Env: req.Env, Memory: req.Memory}); err != nil {
		return backend.ExecuteResult{}, err
	}
	defer b.sb.RemoveWorkspace(context.WithoutCancel(ctx), req.SessionID)
	defer b.CloseSession(context.WithoutCancel(ctx), req.SessionID)
	return b.ExecuteInSession(ctx, req, nil)
}

func (b *bash) OpenSession(ctx context.Context, req backend.OpenSessionRequest) (backend.SessionInfo, error) {
	req.Image = cmp.Or(req.Image, "mcp-forge/python:3.11")
	c, err := b.sb.Create(ctx, host.Intent{Image: req.Image, Command: []string{"bash", "--norc", "-c", loop}, Env: req.Env, Memory: req.Memory, WorkDir: "/s", SessionID: req.SessionID, Mounts: []host.Mount{{Target: "/s"}}})
	if err != nil {
		return backend.SessionInfo{}, err
	}
	if err := b.sb.Start(ctx, c.ID); err != nil {
		b.sb.Remove(ctx, c.ID)
		return backend.SessionInfo{}, err
	}
	b.sessions.Store(req.SessionID, &session{req: req, ctr: c.ID})
	return backend.SessionInfo{SessionID: req.SessionID, ContainerID: c.ID, Language: "bash"}, nil
}

func (b *bash) get(id string) (*session, error) {
	if s, ok := b.sessions.Load(id); ok {
		return s.(*session), nil
	}
	return nil, host.Errorf(host.KindNotFound, "no open bash session %q", id)
}

func (b *bash) ExecuteInSession(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	s, err := b.get(req.SessionID)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != "" {
		return deadResult(s.dead), nil
	}
	start := time.Now()
	timeout := cmp.Or(req.Timeout, 5*time.Minute)
	s.n++
	n := strconv.Itoa(s.n)
	// run execs a helper script with the run number as $1.
	run := func(script string, d time.Duration, stdin []byte, out func(host.Stream, []byte)) (host.ExecResult, error) {
		return b.sb.Exec(ctx, s.ctr, host.ExecRequest{Command: []string{"sh", "-c", script, "-", n}, Timeout: d, Stdin: stdin, Output: out, MaxBytes: cmp.Or(req.MaxOutputBytes, 1<<20)})
	}
	// What wait prints is o<n>, the snippet's stdout, as it grows.
	stream := func(_ host.Stream, p []byte) {
		if emit != nil {
			emit(backend.StreamEvent{Name: host.Stdout, Text: string(p)})
		}
	}
	var w host.ExecResult
	var timedOut *backend.ExecError
	if _, err = run(submit, time.Minute, []byte(req.Code+"\n"), nil); err == nil {
		w, err = run(wait, timeout, nil, stream)
		if err == nil && w.TimedOut {
			// Interrupt the snippet, keep the shell; wait for its status.
			b.sb.Signal(ctx, s.ctr, host.SIGINT, host.SignalAll)
			w, err = run(wait, 10*time.Second, nil, nil)
			timedOut = &backend.ExecError{Name: "Timeout", Message: fmt.Sprintf("interrupted at the %s timeout; the shell and its variables are kept", timeout)}
		}
	}
	if ctx.Err() != nil {
		// The core gave up on the call: the snippet must not run on.
		b.sb.Signal(context.WithoutCancel(ctx), s.ctr, host.SIGINT, host.SignalAll)
		return backend.ExecuteResult{}, ctx.Err()
	}
	// A shell that did not answer the interrupt, or that exited, is dead.
	if st, serr := b.sb.State(ctx, s.ctr); err != nil || w.TimedOut || (serr == nil && !st.Running) {
		s.dead = fmt.Sprintf("the bash session ended (%s); its state is lost", st.Message)
		b.sb.Remove(context.WithoutCancel(ctx), s.ctr)
		return deadResult(s.dead), nil
	}
	r, err := run(collect, time.Minute, nil, nil)
	res := backend.ExecuteResult{Stdout: string(r.Stdout), Stderr: string(r.Stderr), StdoutBytes: r.StdoutTotal, StderrBytes: r.StderrTotal,
		ExitCode: r.ExitCode, Error: timedOut, Duration: time.Since(start), Success: timedOut == nil && r.ExitCode == 0}
	if timedOut == nil && r.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "ExitStatus", Message: fmt.Sprintf("exit status %d: %s", r.ExitCode, strings.TrimSpace(res.Stderr))}
	}
	return res, err
}

func deadResult(why string) backend.ExecuteResult {
	return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: why}}
}

func (b *bash) Interrupt(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err == nil {
		err = b.sb.Signal(ctx, s.ctr, host.SIGINT, host.SignalAll)
	}
	return err
}

func (b *bash) Inspect(context.Context, string) ([]backend.Variable, error) { return nil, nil }

// RestartSession starts a fresh shell in a fresh container.
func (b *bash) RestartSession(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err == nil && b.CloseSession(ctx, id) == nil {
		_, err = b.OpenSession(ctx, s.req)
	}
	return err
}

func (b *bash) CloseSession(ctx context.Context, id string) error {
	s, ok := b.sessions.LoadAndDelete(id)
	if !ok || s.(*session).dead != "" { // a dead session's container is gone already
		return nil
	}
	return b.sb.Remove(ctx, s.(*session).ctr)
}

// Info is who the plugin says it is. It takes no [plugins.bash.config] key.
var Info = plugin.Info{Name: "bash", Version: "0.1.0", Description: "persistent bash sessions"}

// New is the factory the SDK calls once the core has connected the host
// services: everything the plugin does goes through h.
func New(h host.Host, _ backend.Config) (backend.Backend, error) { return &bash{sb: h.Sandbox()}, nil }

func main() { plugin.ServeBackend(Info, New) }
