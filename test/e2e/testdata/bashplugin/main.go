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

// The shell reads a run number n from a fifo, sources c<n> (an interrupt returns from it) and
// writes its status to r<n>, renamed into place; wait streams o<n> until r<n> exists.
const loop = `trap : INT; mkfifo in; exec 3<>in; while IFS= read -r n <&3; do
trap 'return 130' INT; . ./c$n >o$n 2>e$n; echo $? >r$n.t; trap : INT; mv r$n.t r$n; done`
const wait = `(until [ -e r$1 ]; do sleep 0.02; done) & tail -s 0.05 -n +1 -F --pid=$! o$1 2>/dev/null`

var caps = backend.Capabilities{Languages: []string{"bash"}, Stateful: true, Interrupt: true}

type session struct {
	mu        sync.Mutex
	req       backend.OpenSessionRequest
	ctr, dead string
	n         int
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
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: s.dead}}, nil
	}
	start, timeout, n, w, why := time.Now(), cmp.Or(req.Timeout, 5*time.Minute), strconv.Itoa(s.n+1), host.ExecResult{}, (*backend.ExecError)(nil)
	s.n++
	run := func(script string, d time.Duration, stdin []byte, out func(string, []byte)) (host.ExecResult, error) {
		return b.sb.Exec(ctx, s.ctr, host.ExecRequest{Command: []string{"sh", "-c", script, "-", n}, Timeout: d, Stdin: stdin, Output: out, MaxBytes: cmp.Or(req.MaxOutputBytes, 1<<20)})
	}
	stream := func(_ string, p []byte) {
		if emit != nil {
			emit(backend.StreamEvent{Name: "stdout", Text: string(p)})
		}
	}
	// The code goes in on stdin; the fifo may not exist yet right after start.
	if _, err = run(`cat >c$1; until [ -p in ]; do sleep 0.01; done; echo $1 >in`, time.Minute, []byte(req.Code+"\n"), nil); err == nil {
		if w, err = run(wait, timeout, nil, stream); err == nil && w.TimedOut {
			b.sb.Signal(ctx, s.ctr, "INT", host.SignalAll)
			w, err = run(wait, 10*time.Second, nil, nil)
			why = &backend.ExecError{Name: "Timeout", Message: fmt.Sprintf("interrupted at the %s timeout; the shell and its variables are kept", timeout)}
		}
	}
	if ctx.Err() != nil {
		b.sb.Signal(context.WithoutCancel(ctx), s.ctr, "INT", host.SignalAll)
		return backend.ExecuteResult{}, ctx.Err()
	}
	if st, serr := b.sb.State(ctx, s.ctr); err != nil || w.TimedOut || (serr == nil && !st.Running) {
		s.dead = fmt.Sprintf("the bash session ended (%s); its state is lost", st.Message)
		b.sb.Remove(context.WithoutCancel(ctx), s.ctr)
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: s.dead}}, nil
	}
	r, err := run(`cat o$1; cat e$1 >&2; rc=$(cat r$1); rm -f c$1 o$1 e$1 r$1; exit $rc`, time.Minute, nil, nil)
	res := backend.ExecuteResult{Stdout: string(r.Stdout), Stderr: string(r.Stderr), StdoutBytes: r.StdoutTotal, StderrBytes: r.StderrTotal, ExitCode: r.ExitCode, Error: why, Duration: time.Since(start), Success: why == nil && r.ExitCode == 0}
	if why == nil && r.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "ExitStatus", Message: fmt.Sprintf("exit status %d: %s", r.ExitCode, strings.TrimSpace(res.Stderr))}
	}
	return res, err
}

func (b *bash) Interrupt(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err == nil {
		err = b.sb.Signal(ctx, s.ctr, "INT", host.SignalAll)
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

func main() {
	info := plugin.Info{Name: "bash", Version: "0.1.0", Description: "persistent bash sessions"}
	plugin.ServeBackend(info, func(h host.Host, _ backend.Config) (backend.Backend, error) { return &bash{sb: h.Sandbox()}, nil })
}
