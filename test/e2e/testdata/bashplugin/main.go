// A third-party stateful backend built only on the public SDK: one
// long-lived bash per session sources every snippet, so `export X=1` in one
// call is seen by `echo $X` in the next; a timeout interrupts the snippet
// (SIGINT to every process) and keeps the shell and its state.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// The shell reads a run number n from a fifo, sources c<n> (an interrupt
// returns from it) and writes its status to r<n>, renamed into place.
const loop = `trap : INT; mkfifo in; exec 3<>in; while IFS= read -r n <&3; do
trap 'return 130' INT; . ./c$n >o$n 2>e$n; echo $? >r$n.t; trap : INT; mv r$n.t r$n; done`

// wait streams o<n> until r<n> exists (tail reads to the end once it does).
const wait = `(until [ -e r$1 ]; do sleep 0.02; done) & tail -s 0.05 -n +1 -F --pid=$! o$1 2>/dev/null`

type session struct {
	mu   sync.Mutex
	req  backend.OpenSessionRequest
	ctr  string
	n    int
	dead string
}

type bash struct {
	sb       host.Sandbox
	mu       sync.Mutex
	sessions map[string]*session
}

func (b *bash) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"bash"}, Stateful: true, Interrupt: true}, nil
}

// Execute runs code in a throw-away session, removed with its workspace.
func (b *bash) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	id := make([]byte, 6)
	rand.Read(id)
	req.SessionID = "b" + hex.EncodeToString(id)
	if _, err := b.OpenSession(ctx, backend.OpenSessionRequest{SessionID: req.SessionID, Image: req.Image, Env: req.Env, Memory: req.Memory}); err != nil {
		return backend.ExecuteResult{}, err
	}
	defer b.sb.RemoveWorkspace(context.WithoutCancel(ctx), req.SessionID)
	defer b.CloseSession(context.WithoutCancel(ctx), req.SessionID)
	return b.ExecuteInSession(ctx, req, nil)
}

func (b *bash) OpenSession(ctx context.Context, req backend.OpenSessionRequest) (backend.SessionInfo, error) {
	if req.Image == "" {
		req.Image = "mcp-forge/python:3.11"
	}
	c, err := b.sb.Create(ctx, host.Intent{Image: req.Image, Command: []string{"bash", "--norc", "-c", loop}, Env: req.Env,
		Memory: req.Memory, WorkDir: "/s", SessionID: req.SessionID, Mounts: []host.Mount{{Target: "/s"}}})
	if err == nil {
		if err = b.sb.Start(ctx, c.ID); err != nil {
			b.sb.Remove(ctx, c.ID)
		}
	}
	if err != nil {
		return backend.SessionInfo{}, err
	}
	b.mu.Lock()
	b.sessions[req.SessionID] = &session{req: req, ctr: c.ID}
	b.mu.Unlock()
	return backend.SessionInfo{SessionID: req.SessionID, ContainerID: c.ID, Language: "bash"}, nil
}

func (b *bash) get(id string) (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		return s, nil
	}
	return nil, host.Errorf(host.KindNotFound, "no open bash session %q", id)
}

var lineRe = regexp.MustCompile(`\./c\d+: line (\d+): `)

func (b *bash) ExecuteInSession(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	s, err := b.get(req.SessionID)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start, res, timeout, n := time.Now(), backend.ExecuteResult{}, req.Timeout, strconv.Itoa(s.n+1)
	s.n++
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	waitFor := func(d time.Duration) (host.ExecResult, error) {
		return b.sb.Exec(ctx, s.ctr, host.ExecRequest{Command: []string{"sh", "-c", wait, "-", n}, Timeout: d, Output: func(_ string, p []byte) {
			if emit != nil {
				emit(backend.StreamEvent{Name: "stdout", Text: string(p)})
			}
		}})
	}
	var w host.ExecResult
	if s.dead != "" {
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: s.dead}}, nil
	}
	if err = b.sb.PutFile(ctx, s.ctr, "c"+n, []byte(req.Code+"\n")); err == nil {
		if _, err = b.sb.Exec(ctx, s.ctr, host.ExecRequest{Command: []string{"sh", "-c", "until [ -p in ]; do sleep 0.01; done; cat >in"}, Stdin: []byte(n + "\n"), Timeout: time.Minute}); err == nil {
			if w, err = waitFor(timeout); err == nil && w.TimedOut {
				b.sb.Signal(ctx, s.ctr, "INT", host.SignalAll)
				w, err = waitFor(10 * time.Second)
				res.Error = &backend.ExecError{Name: "Timeout", Message: fmt.Sprintf("interrupted at the %s timeout; the shell and its variables are kept", timeout)}
			}
		}
	}
	if ctx.Err() != nil {
		b.sb.Signal(context.WithoutCancel(ctx), s.ctr, "INT", host.SignalAll)
		return res, ctx.Err()
	}
	if st, serr := b.sb.State(ctx, s.ctr); err != nil || w.TimedOut || (serr == nil && !st.Running) {
		s.dead = fmt.Sprintf("the bash session ended (%s); its state is lost", st.Message)
		b.sb.Remove(context.WithoutCancel(ctx), s.ctr)
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: s.dead}, Duration: time.Since(start)}, nil
	}
	out, _ := b.sb.GetFile(ctx, s.ctr, "o"+n, host.MaxFileBytes)
	errb, _ := b.sb.GetFile(ctx, s.ctr, "e"+n, host.MaxFileBytes)
	rc, _ := b.sb.GetFile(ctx, s.ctr, "r"+n, 64)
	b.sb.Exec(ctx, s.ctr, host.ExecRequest{Command: []string{"rm", "-f", "c" + n, "o" + n, "e" + n, "r" + n}})
	res.StdoutBytes, res.StderrBytes = int64(len(out)), int64(len(errb))
	if max := req.MaxOutputBytes; max > 0 {
		out, errb = out[:min(int64(len(out)), max)], errb[:min(int64(len(errb)), max)]
	}
	res.Stdout, res.Stderr, res.Duration = string(out), string(errb), time.Since(start)
	res.ExitCode, _ = strconv.Atoi(strings.TrimSpace(string(rc)))
	if res.Error == nil && res.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "ExitStatus", Message: fmt.Sprintf("exit status %d: %s", res.ExitCode, strings.TrimSpace(res.Stderr))}
		if m := lineRe.FindStringSubmatch(res.Stderr); m != nil {
			res.Error.Line, _ = strconv.Atoi(m[1])
		}
	}
	res.Success = res.Error == nil
	return res, nil
}

func (b *bash) Interrupt(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err != nil {
		return err
	}
	return b.sb.Signal(ctx, s.ctr, "INT", host.SignalAll)
}

func (b *bash) Inspect(context.Context, string) ([]backend.Variable, error) { return nil, nil }

// RestartSession starts a fresh shell in a fresh container.
func (b *bash) RestartSession(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err == nil {
		err = b.CloseSession(ctx, id)
	}
	if err == nil {
		_, err = b.OpenSession(ctx, s.req)
	}
	return err
}

func (b *bash) CloseSession(ctx context.Context, id string) error {
	b.mu.Lock()
	s := b.sessions[id]
	delete(b.sessions, id)
	b.mu.Unlock()
	if s == nil || s.dead != "" { // a dead session's container is gone already
		return nil
	}
	return b.sb.Remove(ctx, s.ctr)
}

func main() {
	plugin.ServeBackend(plugin.Info{Name: "bash", Version: "0.1.0", Description: "persistent bash sessions"},
		func(h host.Host, _ backend.Config) (backend.Backend, error) {
			return &bash{sb: h.Sandbox(), sessions: map[string]*session{}}, nil
		})
}
