package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// LocalHost is a fake host.Host for unit tests: it runs a container's command
// as a local process, with mount targets rewritten to workspace directories.
// It gives no isolation at all; it exists so that backend logic can be tested
// quickly without Podman. Real confinement is tested against the real core.
//
// Where it can, it behaves like the sandbox: the host's environment is not
// passed on (only a default PATH, HOME=/tmp and the intent's Env); the
// container's Env and WorkDir apply to its command and to Exec; a timeout or
// a kill ends the whole process group, not just the first process; an Exec
// ends when the container's command does; and only
// an argument or environment value that is, as a whole, a path under a mount
// target is rewritten to the workspace (code passed as an argument is never
// touched).
type LocalHost struct {
	Base string // workspaces live here

	mu       sync.Mutex
	ctrs     map[string]*localCtr
	sessions map[string]string // session id → workspace made for it
	removed  map[string]bool   // containers removed: removing them again succeeds, as in the core
	clamps   int               // WarmUp containers clamped
	Events   []host.Event
}

type localCtr struct {
	in        host.Intent
	workspace string
	endpoints map[string]string // name → path in the workspace
	cmd       *exec.Cmd
	env       []string
	dir       string
	stdout    lockedBuffer
	stderr    lockedBuffer
	done      chan struct{}
	clamped   bool   // Clamp was called (under LocalHost.mu)
	claimedBy string // the sandbox grant Claim gave it to (under LocalHost.mu)

	// Its execs: Remove ends them and waits for them before the workspace
	// goes, as removing a real container ends its execs; else one still
	// writing there races the removal.
	execMu sync.Mutex
	gone   bool
	execs  map[int]bool // process group ids
	execWG sync.WaitGroup
}

var errRemoving = host.Errorf(host.KindNotFound, "the container is being removed")

// startExec starts x as an exec of c, unless c is being removed.
func (c *localCtr) startExec(x *exec.Cmd) error {
	c.execMu.Lock()
	defer c.execMu.Unlock()
	if c.gone {
		return errRemoving
	}
	if err := x.Start(); err != nil {
		return err
	}
	if c.execs == nil {
		c.execs = map[int]bool{}
	}
	c.execs[x.Process.Pid] = true
	c.execWG.Add(1)
	return nil
}

func (c *localCtr) execEnded(x *exec.Cmd) {
	c.execMu.Lock()
	delete(c.execs, x.Process.Pid)
	c.execMu.Unlock()
	c.execWG.Done()
}

// endExecs kills every exec of c and waits for them; none starts after.
func (c *localCtr) endExecs() {
	c.execMu.Lock()
	c.gone = true
	for pid := range c.execs {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	c.execMu.Unlock()
	c.execWG.Wait()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) snapshot() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}

// DefaultPath is the PATH sandboxed commands get, as in a container image.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sessionID is the core's rule for session ids (core/workspace).
var sessionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// NewLocalHost returns a fake host with workspaces under base.
func NewLocalHost(base string) *LocalHost {
	return &LocalHost{Base: base, ctrs: map[string]*localCtr{}, sessions: map[string]string{}, removed: map[string]bool{}}
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

// rewrite maps a container path under a mount target to the workspace.
func (c *localCtr) rewrite(s string) string {
	if !strings.HasPrefix(s, "/") {
		return s
	}
	for _, m := range c.in.Mounts {
		if s == m.Target || strings.HasPrefix(s, m.Target+"/") {
			return filepath.Join(c.workspace, m.Subdir) + strings.TrimPrefix(s, m.Target)
		}
	}
	return s
}

func (c *localCtr) environ(extra map[string]string) []string {
	env := append([]string(nil), c.env...)
	for k, v := range extra {
		env = append(env, k+"="+c.rewrite(v))
	}
	return env
}

func (c *localCtr) command(ctx context.Context, argv []string) *exec.Cmd {
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = c.rewrite(a)
	}
	x := exec.CommandContext(ctx, args[0], args[1:]...)
	// A process group of its own, so a kill reaches whatever it started.
	x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	x.Cancel = func() error { return syscall.Kill(-x.Process.Pid, syscall.SIGKILL) }
	x.WaitDelay = 2 * time.Second
	return x
}

// Create implements host.Sandbox.
func (h *LocalHost) Create(ctx context.Context, in host.Intent) (host.Container, error) {
	if len(in.Command) == 0 {
		return host.Container{}, host.Errorf(host.KindInvalid, "no command")
	}
	if in.SessionID != "" && !sessionID.MatchString(in.SessionID) {
		return host.Container{}, host.Errorf(host.KindInvalid, "invalid session id %q: use 1-128 letters, digits, '-' or '_', starting with a letter or digit", in.SessionID)
	}
	endpoints, err := host.EndpointPlaces(in)
	if err != nil {
		return host.Container{}, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	id := hex.EncodeToString(b)
	ws := filepath.Join(h.Base, "r"+id)
	if in.SessionID != "" {
		ws = filepath.Join(h.Base, in.SessionID)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return host.Container{}, err
	}
	for _, m := range in.Mounts {
		if err := os.MkdirAll(filepath.Join(ws, filepath.Clean("/"+m.Subdir)), 0o755); err != nil {
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
	c := &localCtr{in: in, workspace: ws, endpoints: endpoints, done: make(chan struct{})}
	c.env = []string{"PATH=" + DefaultPath, "HOME=/tmp"}
	c.env = c.environ(in.Env)
	c.dir = ws
	if in.WorkDir != "" {
		c.dir = c.rewrite(in.WorkDir)
	}
	c.cmd = c.command(context.Background(), in.Command)
	c.cmd.Env, c.cmd.Dir = c.env, c.dir
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	h.mu.Lock()
	h.ctrs[id] = c
	if in.SessionID != "" {
		h.sessions[in.SessionID] = ws
	}
	h.mu.Unlock()
	// As the core does: a caller gone meanwhile gets no container.
	if err := ctx.Err(); err != nil {
		h.Remove(context.WithoutCancel(ctx), id)
		return host.Container{}, err
	}
	return host.Container{ID: id}, nil
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
	go func() { c.cmd.Wait(); close(c.done) }()
	return nil
}

func (c *localCtr) killGroup(sig syscall.Signal) {
	if c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	}
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
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return host.WaitResult{ExitCode: exitCode(c.cmd.ProcessState)}, nil
	case <-t.C:
		c.killGroup(syscall.SIGKILL)
		<-c.done
		return host.WaitResult{ExitCode: 137, TimedOut: true, Message: fmt.Sprintf("execution timed out after %s", timeout)}, nil
	case <-ctx.Done():
		c.killGroup(syscall.SIGKILL)
		return host.WaitResult{}, ctx.Err()
	}
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// State implements host.Sandbox.
func (h *LocalHost) State(_ context.Context, id string) (host.State, error) {
	c, err := h.get(id)
	if err != nil {
		return host.State{}, err
	}
	select {
	case <-c.done:
		code := exitCode(c.cmd.ProcessState)
		return host.State{ExitCode: code, Message: fmt.Sprintf("the process exited with code %d", code)}, nil
	default:
		return host.State{Running: c.cmd.Process != nil}, nil
	}
}

func capBytes(b []byte, max int64) []byte {
	if max >= 0 && int64(len(b)) > max {
		return b[:max]
	}
	return b
}

// Logs implements host.Sandbox.
func (h *LocalHost) Logs(_ context.Context, id string, max int64) (host.Output, error) {
	c, err := h.get(id)
	if err != nil {
		return host.Output{}, err
	}
	so, se := c.stdout.snapshot(), c.stderr.snapshot()
	return host.Output{Stdout: capBytes(so, max), Stderr: capBytes(se, max), StdoutTotal: int64(len(so)), StderrTotal: int64(len(se))}, nil
}

type streamWriter struct {
	buf  lockedBuffer
	name host.Stream
	mu   *sync.Mutex
	out  func(host.Stream, []byte)
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if w.out != nil {
		w.mu.Lock()
		w.out(w.name, append([]byte(nil), p...))
		w.mu.Unlock()
	}
	return w.buf.Write(p)
}

// Exec implements host.Sandbox: in the container's environment and working
// directory, with the request's additions, its own process group, and a
// timeout that kills that whole group.
func (h *LocalHost) Exec(ctx context.Context, id string, req host.ExecRequest) (host.ExecResult, error) {
	c, err := h.get(id)
	if err != nil {
		return host.ExecResult{}, err
	}
	if len(req.Command) == 0 {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec needs a command")
	}
	if req.Timeout < 0 {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec timeout %s is negative", req.Timeout)
	}
	if len(req.Stdin) > host.MaxFileBytes {
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "exec stdin of %d bytes is over the %d-byte limit", len(req.Stdin), host.MaxFileBytes)
	}
	select {
	case <-c.done:
		return host.ExecResult{}, host.Errorf(host.KindInvalid, "container %s is not running", id)
	default:
	}
	if req.MaxBytes <= 0 || req.MaxBytes > host.MaxExecOutputBytes {
		req.MaxBytes = host.MaxExecOutputBytes
	}
	xctx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		xctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	x := c.command(xctx, req.Command)
	x.Env, x.Dir = c.environ(req.Env), c.dir
	if req.WorkDir != "" {
		x.Dir = c.rewrite(req.WorkDir)
	}
	if req.Stdin != nil {
		x.Stdin = bytes.NewReader(req.Stdin)
	}
	var mu sync.Mutex
	so := &streamWriter{name: host.Stdout, mu: &mu, out: req.Output}
	se := &streamWriter{name: host.Stderr, mu: &mu, out: req.Output}
	x.Stdout, x.Stderr = so, se
	if err = c.startExec(x); err == nil {
		defer c.execEnded(x)
		// The command ends with its container, as an exec does in a real one.
		over := make(chan struct{})
		go func() {
			select {
			case <-c.done:
				_ = syscall.Kill(-x.Process.Pid, syscall.SIGKILL)
			case <-over:
			}
		}()
		err = x.Wait()
		close(over)
	}
	if errors.Is(err, errRemoving) {
		return host.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && x.ProcessState == nil {
		return host.ExecResult{ExitCode: 127, Output: host.Output{Stderr: []byte(err.Error())}}, nil
	}
	timedOut := req.Timeout > 0 && errors.Is(xctx.Err(), context.DeadlineExceeded)
	if ctx.Err() != nil {
		return host.ExecResult{}, ctx.Err()
	}
	o, e := so.buf.snapshot(), se.buf.snapshot()
	return host.ExecResult{ExitCode: exitCode(x.ProcessState), TimedOut: timedOut, Output: host.Output{
		Stdout: capBytes(o, req.MaxBytes), Stderr: capBytes(e, req.MaxBytes), StdoutTotal: int64(len(o)), StderrTotal: int64(len(e))}}, nil
}

var signals = map[host.Signal]syscall.Signal{host.SIGINT: syscall.SIGINT, host.SIGTERM: syscall.SIGTERM, host.SIGKILL: syscall.SIGKILL,
	host.SIGHUP: syscall.SIGHUP, host.SIGQUIT: syscall.SIGQUIT, host.SIGUSR1: syscall.SIGUSR1, host.SIGUSR2: syscall.SIGUSR2}

// Signal implements host.Sandbox. There is no init process here: SignalInit
// reaches the command itself, SignalAll its whole process group.
func (h *LocalHost) Signal(_ context.Context, id string, sig host.Signal, scope host.SignalScope) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	s, ok := signals[sig.Normal()]
	if !ok {
		return host.Errorf(host.KindInvalid, "signal %q is not allowed", sig)
	}
	if c.cmd.Process == nil {
		return nil
	}
	if scope == host.SignalAll {
		c.killGroup(s)
		return nil
	}
	return c.cmd.Process.Signal(s)
}

// Stop implements host.Sandbox.
func (h *LocalHost) Stop(_ context.Context, id string, _ time.Duration) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	c.killGroup(syscall.SIGKILL)
	return nil
}

// Remove implements host.Sandbox; an ephemeral workspace goes with it.
// Removing a removed container succeeds.
func (h *LocalHost) Remove(_ context.Context, id string) error {
	c, err := h.get(id)
	if err != nil {
		h.mu.Lock()
		gone := h.removed[id]
		h.mu.Unlock()
		if gone {
			return nil
		}
		return err
	}
	if c.cmd.Process != nil {
		c.killGroup(syscall.SIGKILL)
		<-c.done
	}
	c.endExecs()
	if c.in.SessionID == "" {
		os.RemoveAll(c.workspace)
	}
	h.mu.Lock()
	delete(h.ctrs, id)
	h.removed[id] = true
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

// relPath checks a workspace-relative path.
func relPath(p string) (string, error) {
	clean := filepath.Clean(p)
	if p == "" || filepath.IsAbs(p) || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", host.Errorf(host.KindInvalid, "path %q must be relative to the workspace and stay in it", p)
	}
	return clean, nil
}

// PutFile implements host.Sandbox. A link at the path is refused, as the
// core refuses it; os.Root keeps links on the way from leaving the
// workspace (the core follows none at all).
func (h *LocalHost) PutFile(_ context.Context, id, path string, data []byte) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	rel, err := relPath(path)
	if err != nil {
		return err
	}
	if len(data) > host.MaxFileBytes {
		return host.Errorf(host.KindInvalid, "file %q is over %d bytes", path, host.MaxFileBytes)
	}
	root, err := os.OpenRoot(c.workspace)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return host.Errorf(host.KindPolicy, "path %q: %v", path, err)
		}
	}
	if st, err := root.Lstat(rel); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return host.Errorf(host.KindPolicy, "path %q is a symbolic link; links are not followed", path)
	}
	if err := root.WriteFile(rel, data, 0o644); err != nil {
		return host.Errorf(host.KindPolicy, "path %q: %v", path, err)
	}
	return nil
}

// GetFile implements host.Sandbox.
func (h *LocalHost) GetFile(_ context.Context, id, path string, max int64) ([]byte, error) {
	c, err := h.get(id)
	if err != nil {
		return nil, err
	}
	rel, err := relPath(path)
	if err != nil {
		return nil, err
	}
	if max <= 0 || max > host.MaxFileBytes {
		max = host.MaxFileBytes
	}
	root, err := os.OpenRoot(c.workspace)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, host.Errorf(host.KindNotFound, "path %q does not exist in the workspace", path)
		}
		return nil, host.Errorf(host.KindPolicy, "path %q: %v", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, host.Errorf(host.KindPolicy, "path %q is not a regular file", path)
	} else if st.Size() > max {
		return nil, host.Errorf(host.KindInvalid, "file %q is %d bytes, over the %d-byte cap", path, st.Size(), max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// RemoveWorkspace implements host.Sandbox.
func (h *LocalHost) RemoveWorkspace(_ context.Context, sessionID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws, ok := h.sessions[sessionID]
	if !ok {
		return host.Errorf(host.KindNotFound, "no workspace was made for session %q", sessionID)
	}
	for id, c := range h.ctrs {
		if c.workspace == ws {
			return host.Errorf(host.KindInvalid, "workspace of session %s is still used by container %s: remove the container first", sessionID, id)
		}
	}
	delete(h.sessions, sessionID)
	return os.RemoveAll(ws)
}

// Dial implements host.Sandbox as the core does on Podman: the socket at
// the endpoint's place in the workspace, opened without following a link
// (O_PATH|O_NOFOLLOW) and connected through /proc/self/fd, so a link
// planted in place of the socket is refused, not followed.
func (h *LocalHost) Dial(ctx context.Context, id, endpoint string) (net.Conn, error) {
	c, err := h.get(id)
	if err != nil {
		return nil, err
	}
	rel, ok := c.endpoints[endpoint]
	if !ok {
		return nil, host.Errorf(host.KindNotFound, "container %s declares no endpoint %q", id, endpoint)
	}
	fd, err := syscall.Open(filepath.Join(c.workspace, rel), unix.O_PATH|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, host.Errorf(host.KindUnavailable, "endpoint %q of container %s: nothing listens there yet", endpoint, id)
		}
		return nil, host.Errorf(host.KindInternal, "endpoint %q of container %s: %v", endpoint, id, err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, host.Errorf(host.KindInternal, "endpoint %q of container %s: %v", endpoint, id, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, host.Errorf(host.KindPolicy, "endpoint %q of container %s is not a socket (a link or a file was put there); refusing to follow it", endpoint, id)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, host.Errorf(host.KindUnavailable, "endpoint %q of container %s: nothing listens there yet", endpoint, id)
		}
		return nil, host.Errorf(host.KindInternal, "endpoint %q of container %s: %v", endpoint, id, err)
	}
	return conn, nil
}

// Clamp implements host.Sandbox: it records that the container is held to
// its limits (this host enforces none).
func (h *LocalHost) Clamp(_ context.Context, id string) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.in.WarmUp && !c.clamped {
		c.clamped = true
		h.clamps++
	}
	return nil
}

// Claim implements host.Sandbox as the core does: only a container created
// with a sandbox grant (a pool's standing one), once.
func (h *LocalHost) Claim(_ context.Context, id, sandboxGrant string) error {
	c, err := h.get(id)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case sandboxGrant == "":
		return host.Errorf(host.KindInvalid, "claim container %s: no sandbox grant to give it to", id)
	case c.in.SandboxGrant == "":
		return host.Errorf(host.KindPolicy, "claim container %s: it was created without a sandbox grant", id)
	case c.claimedBy != "":
		return host.Errorf(host.KindPolicy, "claim container %s: already claimed", id)
	}
	c.claimedBy = sandboxGrant
	return nil
}

// Claim is a container Claim gave to a sandbox grant.
type Claim struct {
	Container   string
	CreatedWith string // the intent's sandbox grant (a pool's standing one)
	For         string // the grant it was given to
}

// Claims are the containers Claim gave, in no order.
func (h *LocalHost) Claims() []Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Claim
	for id, c := range h.ctrs {
		if c.claimedBy != "" {
			out = append(out, Claim{Container: id, CreatedWith: c.in.SandboxGrant, For: c.claimedBy})
		}
	}
	return out
}

// Clamps is how many WarmUp containers were clamped.
func (h *LocalHost) Clamps() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clamps
}

// WorkspaceOf is the directory of container id's workspace ("" for none),
// for tests that play the sandbox's part in it.
func (h *LocalHost) WorkspaceOf(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.ctrs[id]; ok {
		return c.workspace
	}
	return ""
}

// LegacyWorkspace is WorkspaceOf for the v1 compatibility path
// (sdk/internal/legacyws).
func (h *LocalHost) LegacyWorkspace(id string) string { return h.WorkspaceOf(id) }

// Containers lists the ids of containers created and not yet removed.
func (h *LocalHost) Containers() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id := range h.ctrs {
		ids = append(ids, id)
	}
	return ids
}

var (
	_ host.Host    = (*LocalHost)(nil)
	_ host.Sandbox = (*LocalHost)(nil)
	_ host.Host    = (*Tracker)(nil)
)
