// Package kernel implements backend.SessionBackend for any Jupyter kernel:
// one container and one kernel per session, reached over ipc sockets in the
// session workspace through sdk/jupyter. A kernel plugin supplies a Spec
// (command, how to interrupt, how to inspect variables) and serves
// kernel.New(spec) — the jupyter and irkernel plugins are such specs.
package kernel

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Spec describes a kernel.
type Spec struct {
	Language     string
	DefaultImage string
	// Runtime describes the language in DefaultImage for tool descriptions.
	Runtime backend.Runtime
	// Command starts the kernel with the connection file at connFile.
	Command func(connFile string) []string
	Env     map[string]string
	// InterruptBySignal sends SIGINT to the container instead of an
	// interrupt_request (IRkernel ignores the latter).
	InterruptBySignal bool
	// ValuesAsDisplay: the kernel sends values as display_data rather than
	// execute_result (IRkernel); the last text-only display is the result.
	ValuesAsDisplay bool
	// InspectCode prints one line: InspectMarker followed by a JSON list of
	// {name, type, size, repr, details}. It must leave no names behind.
	InspectCode string
	// ResetCode clears the user namespace, keeping the kernel.
	ResetCode string
	// Checkpoint saves and loads the namespace (backend.Checkpoint); nil:
	// sessions of this kernel cannot be checkpointed.
	Checkpoint *backend.Checkpoint
	// ErrorLine finds the user's line number in an error's traceback.
	ErrorLine func(ename, evalue string, traceback []string) int
}

// figuresHook makes ipykernel return a cell's matplotlib figures whatever
// backend the code chose (figures.py).
//
//go:embed figures.py
var figuresHook string

// devicesSetup makes IRkernel return plots drawn on a device the code
// opened with dev.new() (devices.R).
//
//go:embed devices.R
var devicesSetup string

// IPyKernelCommand starts ipykernel (in the forge Python image) with the
// connection file conn; history is off, so nothing is written to $HOME.
// It launches through ipyLauncher, and runs
// figuresHook as it starts (exec_lines: no round trip, and a warm kernel
// has it as a cold one does).
func IPyKernelCommand(conn string) []string {
	return []string{"python3", "-c", uncommented(ipyLauncher), "-f", conn, "--HistoryManager.enabled=False", "--IPKernelApp.exec_lines=" + uncommented(figuresHook)}
}

// ipyLauncher starts ipykernel as ipykernel_launcher does, with its reader
// of file descriptors 1 and 2 replaced (launcher.py).
//
//go:embed launcher.py
var ipyLauncher string

// IRKernelCommand starts IRkernel (in the forge R image) with the
// connection file conn, after devicesSetup.
func IRKernelCommand(conn string) []string {
	return []string{"R", "--slave", "--no-save", "--no-restore", "-e", uncommented(devicesSetup), "-e", "IRkernel::main()", "--args", conn}
}

// uncommented is code without its comment lines and blank lines: they
// explain the file, and need not lengthen every kernel's command line
// (shown by ps, podman inspect, the pod's spec).
func uncommented(code string) string {
	var b strings.Builder
	for _, l := range strings.Split(code, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// InspectMarker prefixes the introspection line.
const InspectMarker = "__FORGE_VARS__"

// Config is [plugins.NAME.config] merged over the core's settings.
type Config struct {
	backend.ImageConfig
	// From the core (forge:"core": not an operator's key).
	MaxOutputBytes int64 `json:"max_output_bytes" forge:"core"`
	MaxImageBytes  int64 `json:"max_image_bytes" forge:"core"`
	// Warm is how many kernels wait pre-started for new sessions (0:
	// none). Unset, it is 1 for the spec's default image and 0 for another.
	Warm *int `json:"warm"`
}

// Container paths.
const (
	kernelDir = "/forge/k"
	workDir   = "/forge/work"
)

// Backend runs kernels in containers.
type Backend struct {
	spec  Spec
	sb    host.Sandbox
	audit host.Audit
	cfg   Config

	mu       sync.Mutex
	sessions map[string]*session
	pool     pool // pool.go
}

type session struct {
	id        string
	workspace string // the pool id its workspace is named by, for a kernel taken warm; "" for id
	ctr       string
	client    *jupyter.Client
	mu        sync.Mutex // one execute at a time
	dead      string     // why the kernel is gone; "" while alive
}

// New returns a factory for spec.
func New(spec Spec) backend.Factory {
	return func(h host.Host, raw backend.Config) (backend.Backend, error) {
		cfg := Config{ImageConfig: backend.ImageConfig{Image: spec.DefaultImage}, MaxOutputBytes: 1 << 20, MaxImageBytes: 5 << 20}
		if err := raw.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if cfg.Image == "" {
			cfg.Image = spec.DefaultImage
		}
		size := 0
		if cfg.Image == spec.DefaultImage {
			size = 1
		}
		if cfg.Warm != nil {
			size = *cfg.Warm
		}
		if size < 0 || size > 64 {
			return nil, fmt.Errorf("config: warm = %d: use 0 (no pre-started kernels) to 64", size)
		}
		b := &Backend{spec: spec, sb: h.Sandbox(), audit: h.Audit(), cfg: cfg, sessions: map[string]*session{}, pool: pool{size: size, keys: []string{""}, warm: map[string][]*session{}, starting: map[string]int{}}}
		b.fill()
		return b, nil
	}
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) {
	c := backend.Capabilities{Languages: []string{b.spec.Language}, Stateful: true, Interrupt: true, RichOutput: true, MCPTools: true, SandboxGrants: true, Checkpoint: b.spec.Checkpoint}
	b.spec.Runtime.Describe(&c, b.spec.DefaultImage, b.cfg.ImageConfig)
	return c, nil
}

// Stats implements backend.StatsReporter: the warm pool now.
func (b *Backend) Stats(context.Context) (backend.Stats, error) {
	return backend.Stats{WarmPool: b.Pool()}, nil
}

// Execute runs code in a throw-away session.
func (b *Backend) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	id := make([]byte, 6)
	rand.Read(id)
	req.SessionID = "t" + hex.EncodeToString(id)
	info, err := b.OpenSession(ctx, backend.OpenSessionRequest{SessionID: req.SessionID, Image: req.Image, Memory: req.Memory, Env: req.Env, ToolsGrant: req.ToolsGrant, NetworkGrant: req.NetworkGrant, SandboxGrant: req.SandboxGrant, SandboxPoolGrant: req.SandboxPoolGrant})
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	defer func() {
		// The throw-away session is this backend's own, so is its workspace
		// (a warm kernel's is named by its pool id): nothing of the run may
		// stay on the host.
		cctx := context.WithoutCancel(ctx)
		if b.CloseSession(cctx, req.SessionID) == nil {
			_ = b.sb.RemoveWorkspace(cctx, cmp.Or(info.WorkspaceID, req.SessionID))
		}
	}()
	return b.ExecuteInSession(ctx, req, nil)
}

// OpenSession starts a container with the kernel and connects to it.
func (b *Backend) OpenSession(ctx context.Context, req backend.OpenSessionRequest) (backend.SessionInfo, error) {
	b.mu.Lock()
	if _, ok := b.sessions[req.SessionID]; ok {
		b.mu.Unlock()
		return backend.SessionInfo{}, host.Errorf(host.KindInvalid, "session %s is already open", req.SessionID)
	}
	b.sessions[req.SessionID] = nil // reserve
	b.mu.Unlock()
	var s *session
	var err error
	if len(req.Resume) > 0 {
		s, err = b.resume(ctx, req)
	} else if s = b.take(ctx, req); s == nil {
		s, err = b.open(ctx, req, false)
	}
	b.mu.Lock()
	if err != nil {
		delete(b.sessions, req.SessionID)
	} else {
		b.sessions[req.SessionID] = s
	}
	b.mu.Unlock()
	if err != nil {
		return backend.SessionInfo{}, err
	}
	state, err := json.Marshal(resumeState{Version: 1, Session: s.id, Container: s.ctr, Connection: s.client.Connection(), Workspace: s.workspace})
	if err != nil {
		return backend.SessionInfo{}, err
	}
	return backend.SessionInfo{SessionID: s.id, ContainerID: s.ctr, Language: b.spec.Language, WorkspaceID: s.workspace,
		ResumeState: state, Resumed: len(req.Resume) > 0}, nil
}

// resumeState is SessionInfo.ResumeState: what reaches a running kernel
// again, its connection (with the key that signs every message) and the
// workspace its container mounts, bound to the session and the container
// it was written for.
type resumeState struct {
	Version    int                `json:"v"`
	Session    string             `json:"session"`
	Container  string             `json:"container"`
	Connection jupyter.Connection `json:"connection"`
	Workspace  string             `json:"workspace,omitempty"`
}

// resumeTimeout bounds reaching a running kernel again: one that does not
// answer kernel_info by then (busy with a long cell, or not the kernel the
// state was for) is not resumed.
var resumeTimeout = 15 * time.Second

// resume connects to the kernel already running in req.ResumeContainer,
// starting nothing: a kernel that does not answer with the state's key is
// an error, never replaced by a fresh one.
func (b *Backend) resume(ctx context.Context, req backend.OpenSessionRequest) (*session, error) {
	var st resumeState
	if err := json.Unmarshal(req.Resume, &st); err != nil || st.Version != 1 || st.Connection.Key == "" || st.Session == "" || st.Container == "" {
		return nil, host.Errorf(host.KindInvalid, "session %s: the resume state is not one this %s backend wrote (version 1 with a connection key)", req.SessionID, b.spec.Language)
	}
	if req.ResumeContainer == "" {
		return nil, host.Errorf(host.KindInvalid, "session %s: a resume needs the container the kernel runs in", req.SessionID)
	}
	// One kernel, one session: a state is good only for the session and
	// container it was written for (or a whole copy of that container the
	// core restored), and a kernel this backend already serves is not taken
	// a second time.
	if !req.Restored && (st.Session != req.SessionID || st.Container != req.ResumeContainer) {
		return nil, host.Errorf(host.KindInvalid, "session %s: the resume state is of session %s in container %s, not of container %s", req.SessionID, st.Session, st.Container, req.ResumeContainer)
	}
	b.mu.Lock()
	for id, other := range b.sessions {
		if other != nil && other.ctr == req.ResumeContainer {
			b.mu.Unlock()
			return nil, host.Errorf(host.KindInvalid, "session %s: container %s already serves session %s here", req.SessionID, req.ResumeContainer, id)
		}
	}
	b.mu.Unlock()
	if cs, err := b.sb.State(ctx, req.ResumeContainer); err != nil {
		return nil, fmt.Errorf("session %s: the kernel's container: %w", req.SessionID, err)
	} else if !cs.Running {
		return nil, host.Errorf(host.KindUnavailable, "session %s: the kernel's container has stopped (%s); its state is lost", req.SessionID, cs.Message)
	}
	dctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	defer cancel()
	c, err := jupyter.Dial(dctx, st.Connection, b.dialer(req.ResumeContainer))
	if err != nil {
		return nil, host.Errorf(host.KindUnavailable, "session %s: the running %s kernel did not answer: %v", req.SessionID, b.spec.Language, err)
	}
	ws := st.Workspace
	if req.Restored && req.WorkspaceID != "" {
		ws = req.WorkspaceID // the copy mounts its own
	}
	return &session{id: req.SessionID, workspace: ws, ctr: req.ResumeContainer, client: c}, nil
}

// open starts a kernel for req. warmUp: for the pool, started beyond its
// limits (host.Intent.WarmUp) and clamped once it answers, before any code
// of a session can reach it.
func (b *Backend) open(ctx context.Context, req backend.OpenSessionRequest, warmUp bool) (*session, error) {
	conn := jupyter.NewConnection(kernelDir + "/k")
	connJSON, err := json.Marshal(conn)
	// A fresh socket directory for every kernel start: files the previous
	// kernel's code left in the workspace (a symlink where a socket should
	// be) are never dialled.
	rnd := make([]byte, 3)
	rand.Read(rnd)
	sockDir := "k" + hex.EncodeToString(rnd)
	if err != nil {
		return nil, err
	}
	image := req.Image
	if image == "" {
		image = b.cfg.Image
	}
	env := map[string]string{}
	for k, v := range b.spec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	ctr, err := b.sb.Create(ctx, host.Intent{
		Image:        image,
		Command:      b.spec.Command(kernelDir + "/kernel.json"),
		Env:          env,
		WorkDir:      workDir,
		Memory:       req.Memory,
		SessionID:    req.SessionID,
		Mounts:       []host.Mount{{Subdir: sockDir, Target: kernelDir}, {Subdir: "work", Target: workDir}},
		Files:        map[string][]byte{sockDir + "/kernel.json": connJSON},
		Labels:       map[string]string{"kind": "session"},
		ToolsGrant:   req.ToolsGrant,
		NetworkGrant: req.NetworkGrant,
		SandboxGrant: req.SandboxGrant,
		Endpoints:    kernelEndpoints(conn),
		WarmUp:       warmUp,
	})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*session, error) {
		logs, _ := b.sb.Logs(context.WithoutCancel(ctx), ctr.ID, 4096)
		b.sb.Remove(context.WithoutCancel(ctx), ctr.ID)
		if tail := strings.TrimSpace(string(logs.Stderr)); tail != "" {
			return nil, fmt.Errorf("%w; kernel output: %s", err, tail)
		}
		return nil, err
	}
	if err := b.sb.Start(ctx, ctr.ID); err != nil {
		return fail(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type dialed struct {
		c   *jupyter.Client
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := jupyter.Dial(dctx, conn, b.dialer(ctr.ID))
		ch <- dialed{c, err}
	}()
	// Notice a kernel that dies while starting instead of waiting out the dial.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case d := <-ch:
			if d.err != nil {
				return fail(fmt.Errorf("the %s kernel did not start: %w", b.spec.Language, d.err))
			}
			if warmUp {
				if err := b.sb.Clamp(ctx, ctr.ID); err != nil {
					d.c.Close()
					return fail(fmt.Errorf("hold the warm kernel's container to its limits: %w", err))
				}
			}
			return &session{id: req.SessionID, ctr: ctr.ID, client: d.c}, nil
		case <-tick.C:
			if st, err := b.sb.State(ctx, ctr.ID); err == nil && !st.Running {
				cancel()
				return fail(fmt.Errorf("the %s kernel exited while starting: %s", b.spec.Language, st.Message))
			}
		}
	}
}

// kernelEndpoints declares the kernel's five sockets, each an endpoint named
// after its channel.
func kernelEndpoints(conn jupyter.Connection) []host.Endpoint {
	var out []host.Endpoint
	for _, ch := range conn.Channels() {
		out = append(out, host.Endpoint{Name: ch.Name, Path: conn.SocketPath(ch.Port)})
	}
	return out
}

// dialer reaches the channels of container id's kernel through the core.
func (b *Backend) dialer(id string) jupyter.DialFunc {
	return func(ctx context.Context, channel string) (net.Conn, error) {
		c, err := b.sb.Dial(ctx, id, channel)
		var he *host.Error
		if errors.As(err, &he) && he.Kind == host.KindUnavailable {
			return nil, fmt.Errorf("%w: %v", jupyter.ErrNotListening, err)
		}
		return c, err
	}
}

func (b *Backend) get(id string) (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return nil, host.Errorf(host.KindNotFound, "no open session %q", id)
	}
	return s, nil
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// StripANSI removes terminal colour codes from kernel tracebacks.
func StripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// collector builds a result from kernel events.
type collector struct {
	b        *Backend
	res      backend.ExecuteResult
	maxOut   int64
	maxImg   int64
	imgTotal int64 // bytes of images kept; at most 4×maxImg, as for stateless runs
	emit     func(backend.StreamEvent)
	replaced bool // the kernel sent invalid UTF-8
}

func (c *collector) stream(name, text string) {
	dst, total := &c.res.Stdout, &c.res.StdoutBytes
	if name == "stderr" {
		dst, total = &c.res.Stderr, &c.res.StderrBytes
	}
	// Room is counted from what was printed, not kept: once a cut dropped a
	// character, nothing after it may follow, so the output stays a prefix.
	room := c.maxOut - *total
	*total += int64(len(text))
	if room > 0 {
		// Never inside a character: a cut must leave valid text.
		*dst += sanitize.Cut(text, int(min(room, int64(len(text)))))
	}
	if c.emit != nil {
		c.emit(backend.StreamEvent{Name: host.Stream(name), Text: text})
	}
}

func (c *collector) bundle(data map[string]any, isResult bool) {
	gotImage := false
	for _, mime := range []string{"image/png", "image/jpeg", "image/svg+xml"} {
		v, ok := data[mime].(string)
		if !ok {
			continue
		}
		gotImage = true
		raw := []byte(v)
		if mime != "image/svg+xml" {
			dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
			if err != nil {
				continue
			}
			raw = dec
		}
		if int64(len(raw)) > c.maxImg {
			c.res.Notices = append(c.res.Notices, fmt.Sprintf("a %s image of %d bytes was not returned: over the %d-byte image limit (execution.max_image_size)", mime, len(raw), c.maxImg))
			continue
		}
		if c.imgTotal+int64(len(raw)) > 4*c.maxImg {
			c.res.Notices = append(c.res.Notices, fmt.Sprintf("a %s image of %d bytes was not returned: the run's images already total %d bytes, and at most %d are returned (4 × execution.max_image_size)", mime, len(raw), c.imgTotal, 4*c.maxImg))
			continue
		}
		c.imgTotal += int64(len(raw))
		ext := map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/svg+xml": "svg"}[mime]
		c.res.Images = append(c.res.Images, backend.Image{Name: fmt.Sprintf("output_%d.%s", len(c.res.Images)+1, ext), MIMEType: mime, Data: raw})
		break
	}
	text, _ := data["text/plain"].(string)
	if isResult || (c.b.spec.ValuesAsDisplay && !gotImage && text != "") {
		// A result is output too: bounded like stdout, so that one value
		// cannot make an answer larger than a client reads.
		if int64(len(text)) > c.maxOut {
			c.res.Notices = append(c.res.Notices, fmt.Sprintf("the result's text (%d bytes) was cut at the %d-byte output limit (execution.max_output)", len(text), c.maxOut))
			text = strings.ToValidUTF8(text[:c.maxOut], "")
		}
		c.res.ResultRepr = text
		c.rich(data, "the result's")
		var probe any
		if json.Unmarshal([]byte(text), &probe) == nil {
			if _, isNum := probe.(float64); isNum {
				c.res.ResultJSON = text
			}
		}
		return
	}
	// display(HTML(...)), display(Markdown(...)): shown in a notebook, so
	// returned too, after any earlier output of the same type.
	c.rich(data, "a display's")
}

// rich adds a bundle's rich text representations (HTML, Markdown, JSON,
// LaTeX: not text/plain, not images) to the result, each type's outputs in
// the order they came, bounded per type by the output limit.
func (c *collector) rich(data map[string]any, what string) {
	for mime, v := range data {
		s, ok := v.(string)
		if !ok || mime == "text/plain" || strings.HasPrefix(mime, "image/") {
			continue
		}
		if c.res.Rich == nil {
			c.res.Rich = map[string]string{}
		}
		prev, had := c.res.Rich[mime]
		if had {
			s = prev + "\n" + s
		}
		if int64(len(s)) > c.maxOut {
			c.res.Notices = append(c.res.Notices, fmt.Sprintf("%s %s (%d bytes) was not returned: over the %d-byte output limit (execution.max_output)", what, mime, len(v.(string)), c.maxOut))
			continue
		}
		c.res.Rich[mime] = s
	}
}

// ExecuteInSession runs code in the session's kernel. A timeout interrupts
// the kernel (state survives); if it does not respond, or the container
// ends (OOM, crash), the session is dead and the result says why.
func (b *Backend) ExecuteInSession(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	s, err := b.get(req.SessionID)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if s.dead != "" {
		return backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: "SessionDead", Message: s.dead}}, nil
	}
	c := &collector{b: b, maxOut: firstPositive(req.MaxOutputBytes, b.cfg.MaxOutputBytes), maxImg: firstPositive(req.MaxImageBytes, b.cfg.MaxImageBytes), emit: emit}
	x, err := s.client.Execute(req.Code, jupyter.ExecuteOptions{StoreHistory: true})
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	defer x.Close()
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	// The end of the execution (jupyter.Execution.Wait: the reply, then
	// idle) is selected on here with the events and timers, rather than
	// waited for in a goroutine of its own per execute.
	replied, closed := x.Replied(), x.Closed()
	var reply jupyter.Reply
	var idle <-chan struct{}       // the kernel's idle status, once the reply came
	var idleGrace <-chan time.Time // or this long after the reply
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	poll := time.NewTicker(500 * time.Millisecond)
	defer poll.Stop()
	interrupted := false
	var grace <-chan time.Time
	for {
		select {
		case ev := <-x.Events:
			c.event(ev)
		case m := <-replied:
			reply, replied = jupyter.ParseReply(m), nil
			idle, idleGrace = x.Idle(), time.After(jupyter.IdleGrace)
		case <-idle:
			c.drain(x)
			return b.finish(c, reply, interrupted, timeout, start), nil
		case <-idleGrace:
			c.drain(x)
			return b.finish(c, reply, interrupted, timeout, start), nil
		case <-closed:
			if idle != nil { // replied: what Wait returns
				c.drain(x)
				return b.finish(c, reply, interrupted, timeout, start), nil
			}
			return backend.ExecuteResult{}, jupyter.ErrClosed
		case <-timer.C:
			interrupted = true
			b.interrupt(ctx, s)
			grace = time.After(10 * time.Second)
		case <-grace:
			b.kill(s, fmt.Sprintf("the kernel did not respond to an interrupt after the %s timeout and was stopped; the session's state is lost", timeout))
			c.res.Error = &backend.ExecError{Name: "Timeout", Message: s.dead}
			c.res.SessionDead = true
			c.res.Duration = time.Since(start)
			c.noteReplaced(&c.res)
			failedExit(&c.res)
			return c.res, nil
		case <-poll.C:
			st, err := b.sb.State(ctx, s.ctr)
			if err == nil && !st.Running {
				b.kill(s, "the kernel died ("+st.Message+"); the session's state is lost")
				c.drain(x)
				c.res.Error = &backend.ExecError{Name: "KernelDied", Message: s.dead}
				if st.OOMKilled {
					c.res.Error.Name = "OutOfMemory"
				}
				c.res.SessionDead = true
				c.res.Duration = time.Since(start)
				c.noteReplaced(&c.res)
				return c.res, nil
			}
		case <-ctx.Done():
			if idle != nil { // replied: only trailing output was awaited
				c.drain(x)
				return b.finish(c, reply, interrupted, timeout, start), nil
			}
			b.interrupt(context.WithoutCancel(ctx), s)
			return backend.ExecuteResult{}, ctx.Err()
		}
	}
}

// noteReplaced tells the user that invalid UTF-8 from the kernel was
// replaced (the JSON decoder replaces it silently).
func (c *collector) noteReplaced(res *backend.ExecuteResult) {
	if c.replaced {
		res.Notices = append(res.Notices, sanitize.InvalidUTF8Notice([]string{"the kernel's output"}))
	}
}

func (c *collector) event(ev jupyter.Event) {
	c.replaced = c.replaced || ev.InvalidUTF8
	switch ev.Kind {
	case "stream":
		c.stream(ev.Name, ev.Text)
	case "display_data":
		c.bundle(ev.Data, false)
	case "execute_result":
		c.bundle(ev.Data, true)
	}
}

func (c *collector) drain(x *jupyter.Execution) {
	for {
		select {
		case ev := <-x.Events:
			c.event(ev)
		default:
			return
		}
	}
}

// failedExit gives a failed execute a non-zero exit code, as a stateless
// run has: a kernel has no process exit per execute, and a client that
// reads exit_code alone must not take a failure for success.
func failedExit(res *backend.ExecuteResult) {
	if res.Error != nil && res.ExitCode == 0 {
		res.ExitCode = 1
	}
}

func (b *Backend) finish(c *collector, r jupyter.Reply, interrupted bool, timeout time.Duration, start time.Time) backend.ExecuteResult {
	res := c.res
	res.Duration = time.Since(start)
	c.replaced = c.replaced || r.InvalidUTF8
	c.noteReplaced(&res)
	switch {
	case interrupted:
		res.Error = &backend.ExecError{Name: "Timeout", Message: fmt.Sprintf("execution was interrupted at the %s timeout; the session's state is kept (variables set before the interrupt remain)", timeout)}
	case r.Status == "ok":
		res.Success = true
	case r.Status == "error":
		tb := make([]string, len(r.Traceback))
		for i, l := range r.Traceback {
			tb[i] = StripANSI(l)
		}
		res.Error = &backend.ExecError{Name: r.EName, Message: StripANSI(r.EValue), Traceback: tb}
		if b.spec.ErrorLine != nil {
			res.Error.Line = b.spec.ErrorLine(r.EName, res.Error.Message, tb)
		}
		if res.Stderr == "" {
			res.Stderr = strings.Join(tb, "\n") + "\n"
		}
	default:
		res.Error = &backend.ExecError{Name: "Aborted", Message: "the kernel aborted the execution (status " + r.Status + ")"}
	}
	failedExit(&res)
	return res
}

func (b *Backend) interrupt(ctx context.Context, s *session) {
	if !b.spec.InterruptBySignal {
		ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := s.client.Interrupt(ictx)
		cancel()
		if err == nil {
			return
		}
	}
	_ = b.sb.Signal(ctx, s.ctr, "INT", host.SignalInit)
}

// kill removes a session's container and marks it dead.
func (b *Backend) kill(s *session, why string) {
	s.dead = why
	s.client.Close()
	_ = b.sb.Remove(context.Background(), s.ctr)
}

// Interrupt implements backend.SessionBackend.
func (b *Backend) Interrupt(ctx context.Context, id string) error {
	s, err := b.get(id)
	if err != nil {
		return err
	}
	b.interrupt(ctx, s)
	return nil
}

// run executes helper code (introspection, reset) and returns its stdout.
func (b *Backend) run(ctx context.Context, id, code string) (string, error) {
	s, err := b.get(id)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != "" {
		return "", host.Errorf(host.KindInvalid, "session %s is dead: %s", id, s.dead)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	r, events, err := s.client.Run(rctx, code, jupyter.ExecuteOptions{})
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, e := range events {
		if e.Kind == "stream" && e.Name == "stdout" {
			out.WriteString(e.Text)
		}
	}
	if r.Status != "ok" {
		return out.String(), fmt.Errorf("%s: %s", r.EName, StripANSI(r.EValue))
	}
	return out.String(), nil
}

// Inspect implements backend.SessionBackend.
func (b *Backend) Inspect(ctx context.Context, id string) ([]backend.Variable, error) {
	out, err := b.run(ctx, id, b.spec.InspectCode)
	if err != nil {
		return nil, fmt.Errorf("introspection failed: %w", err)
	}
	i := strings.LastIndex(out, InspectMarker)
	if i < 0 {
		return nil, errors.New("introspection printed nothing")
	}
	line := out[i+len(InspectMarker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var raw []struct {
		Name    string         `json:"name"`
		Type    string         `json:"type"`
		Size    int64          `json:"size"`
		Repr    string         `json:"repr"`
		Details map[string]any `json:"details"`
	}
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		return nil, fmt.Errorf("introspection output: %w", err)
	}
	vars := make([]backend.Variable, 0, len(raw))
	for _, v := range raw {
		vars = append(vars, backend.Variable{Name: v.Name, Type: v.Type, Size: v.Size, Repr: v.Repr, Details: v.Details})
	}
	return vars, nil
}

// RestartSession implements backend.SessionBackend: a fresh namespace in
// the same container.
func (b *Backend) RestartSession(ctx context.Context, id string) error {
	_, err := b.run(ctx, id, b.spec.ResetCode)
	return err
}

// CloseSession implements backend.SessionBackend.
func (b *Backend) CloseSession(ctx context.Context, id string) error {
	b.mu.Lock()
	s := b.sessions[id]
	delete(b.sessions, id)
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	if s.dead == "" {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = s.client.Shutdown(sctx, false)
		cancel()
		s.client.Close()
	}
	if err := b.sb.Remove(ctx, s.ctr); err != nil {
		var he *host.Error
		if !errors.As(err, &he) || he.Kind != host.KindPolicy {
			return err
		}
	}
	return nil
}

// Shutdown implements backend.Shutdowner: the warm kernels are removed and
// every session's kernel is told to shut down (its state was checkpointed
// by the core first, if the operator asked) and its container removed, all
// at once, within ctx.
func (b *Backend) Shutdown(ctx context.Context) error {
	b.Drain()
	b.mu.Lock()
	ids := make([]string, 0, len(b.sessions))
	for id := range b.sessions {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.CloseSession(ctx, id)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func firstPositive(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

var (
	_ backend.SessionBackend = (*Backend)(nil)
	_ backend.Shutdowner     = (*Backend)(nil)
)
