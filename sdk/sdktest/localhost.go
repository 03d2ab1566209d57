package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// LocalHost is a fake host.Host for unit tests: it runs a container's command
// as a local process, with mount targets rewritten to workspace directories.
// It gives no isolation at all; it exists so that backend logic can be tested
// quickly without Podman. Real confinement is tested against the real core.
type LocalHost struct {
	Base string // workspaces live here

	mu     sync.Mutex
	ctrs   map[string]*localCtr
	Events []host.Event
}

type localCtr struct {
	in        host.Intent
	workspace string
	cmd       *exec.Cmd
	stdout    bytes.Buffer
	stderr    bytes.Buffer
	done      chan struct{}
	err       error
}

// NewLocalHost returns a fake host with workspaces under a temporary directory.
func NewLocalHost(base string) *LocalHost {
	return &LocalHost{Base: base, ctrs: map[string]*localCtr{}}
}

// Sandbox implements host.Host.
func (h *LocalHost) Sandbox() host.Sandbox { return h }

// Audit implements host.Host.
func (h *LocalHost) Audit() host.Audit { return h }

// Record implements host.Audit.
func (h *LocalHost) Record(_ context.Context, e host.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Events = append(h.Events, e)
	return nil
}

func (h *LocalHost) rewrite(c *localCtr, s string) string {
	for _, m := range c.in.Mounts {
		if s == m.Target || strings.HasPrefix(s, m.Target+"/") {
			return filepath.Join(c.workspace, m.Subdir) + strings.TrimPrefix(s, m.Target)
		}
	}
	return s
}

// Create implements host.Sandbox.
func (h *LocalHost) Create(_ context.Context, in host.Intent) (host.Container, error) {
	b := make([]byte, 6)
	rand.Read(b)
	id := hex.EncodeToString(b)
	ws := filepath.Join(h.Base, id)
	if in.SessionID != "" {
		ws = filepath.Join(h.Base, in.SessionID)
	}
	for _, m := range in.Mounts {
		if err := os.MkdirAll(filepath.Join(ws, m.Subdir), 0o755); err != nil {
			return host.Container{}, err
		}
	}
	for name, data := range in.Files {
		p := filepath.Join(ws, filepath.Clean("/"+name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return host.Container{}, err
		}
	}
	c := &localCtr{in: in, workspace: ws, done: make(chan struct{})}
	args := make([]string, len(in.Command))
	for i, a := range in.Command {
		args[i] = h.rewrite(c, a)
	}
	if len(args) == 0 {
		return host.Container{}, host.Errorf(host.KindInvalid, "no command")
	}
	c.cmd = exec.Command(args[0], args[1:]...)
	c.cmd.Env = os.Environ()
	for k, v := range in.Env {
		c.cmd.Env = append(c.cmd.Env, k+"="+h.rewrite(c, v))
	}
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if in.WorkDir != "" {
		c.cmd.Dir = h.rewrite(c, in.WorkDir)
	}
	h.mu.Lock()
	h.ctrs[id] = c
	h.mu.Unlock()
	return host.Container{ID: id, Workspace: ws}, nil
}

func (h *LocalHost) get(id string) (*localCtr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.ctrs[id]
	if !ok {
		return nil, host.Errorf(host.KindNotFound, "no container %s", id)
	}
	return c, nil
}

// Start implements host.Sandbox.
func (h *LocalHost) Start(_ context.Context, id string) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	if err := c.cmd.Start(); err != nil {
		return err
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	return nil
}

// Wait implements host.Sandbox.
func (h *LocalHost) Wait(ctx context.Context, id string, timeout time.Duration) (host.WaitResult, error) {
	c, err := h.get(id)
	if err != nil {
		return host.WaitResult{}, err
	}
	if timeout <= 0 {
		timeout = c.in.Timeout
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	select {
	case <-c.done:
		return host.WaitResult{ExitCode: c.cmd.ProcessState.ExitCode()}, nil
	case <-time.After(timeout):
		c.cmd.Process.Kill()
		<-c.done
		return host.WaitResult{ExitCode: 137, TimedOut: true, Message: fmt.Sprintf("execution timed out after %s", timeout)}, nil
	case <-ctx.Done():
		c.cmd.Process.Kill()
		return host.WaitResult{}, ctx.Err()
	}
}

// State implements host.Sandbox.
func (h *LocalHost) State(_ context.Context, id string) (host.State, error) {
	c, err := h.get(id)
	if err != nil {
		return host.State{}, err
	}
	select {
	case <-c.done:
		code := c.cmd.ProcessState.ExitCode()
		return host.State{ExitCode: code, Message: fmt.Sprintf("the process exited with code %d", code)}, nil
	default:
		return host.State{Running: c.cmd.Process != nil}, nil
	}
}

// Logs implements host.Sandbox.
func (h *LocalHost) Logs(_ context.Context, id string, max int64) (host.Output, error) {
	c, err := h.get(id)
	if err != nil {
		return host.Output{}, err
	}
	cut := func(b []byte) []byte {
		if int64(len(b)) > max {
			return b[:max]
		}
		return b
	}
	return host.Output{Stdout: cut(c.stdout.Bytes()), Stderr: cut(c.stderr.Bytes()),
		StdoutTotal: int64(c.stdout.Len()), StderrTotal: int64(c.stderr.Len())}, nil
}

// Exec implements host.Sandbox.
func (h *LocalHost) Exec(ctx context.Context, id string, cmd []string, max int64) (host.ExecResult, error) {
	c, err := h.get(id)
	if err != nil {
		return host.ExecResult{}, err
	}
	for i := range cmd {
		cmd[i] = h.rewrite(c, cmd[i])
	}
	var so, se bytes.Buffer
	x := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	x.Stdout, x.Stderr = &so, &se
	x.Run()
	return host.ExecResult{ExitCode: x.ProcessState.ExitCode(), Output: host.Output{Stdout: so.Bytes(), Stderr: se.Bytes(),
		StdoutTotal: int64(so.Len()), StderrTotal: int64(se.Len())}}, nil
}

// Signal implements host.Sandbox.
func (h *LocalHost) Signal(_ context.Context, id, sig string) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	if c.cmd.Process == nil {
		return nil
	}
	switch sig {
	case "INT", "SIGINT":
		return c.cmd.Process.Signal(os.Interrupt)
	}
	return c.cmd.Process.Kill()
}

// Stop implements host.Sandbox.
func (h *LocalHost) Stop(ctx context.Context, id string, _ time.Duration) error {
	return h.Signal(ctx, id, "KILL")
}

// Remove implements host.Sandbox.
func (h *LocalHost) Remove(_ context.Context, id string) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	if c.cmd.Process != nil && c.cmd.ProcessState == nil {
		c.cmd.Process.Kill()
		<-c.done
	}
	if c.in.SessionID == "" {
		os.RemoveAll(c.workspace)
	}
	h.mu.Lock()
	delete(h.ctrs, id)
	h.mu.Unlock()
	return nil
}

// ReadFiles implements host.Sandbox.
func (h *LocalHost) ReadFiles(_ context.Context, id, subdir string, maxFile, maxTotal int64) ([]host.File, error) {
	c, err := h.get(id)
	if err != nil {
		return nil, err
	}
	return host.ReadDir(filepath.Join(c.workspace, filepath.Clean("/"+subdir)), maxFile, maxTotal)
}
