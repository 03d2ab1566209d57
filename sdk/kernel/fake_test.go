package kernel

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
)

// fakeKernel is a Jupyter kernel in process, on the ipc sockets of a
// connection file, speaking the wire protocol (signed with the file's key).
// The code it is sent is a script of its own:
//
//	"error"        an error reply (ZeroDivisionError, ANSI in the traceback)
//	"abort"        an aborted reply
//	"sleep"        no reply until interrupted (KeyboardInterrupt), never
//	               when deaf
//	"die"          the kernel dies mid-execute (dies is called)
//	"inspect"      prints InspectMarker and the variables
//	anything else  prints the code on stdout, results in 42
type fakeKernel struct {
	key    []byte
	deaf   bool   // ignores interrupt_request
	dies   func() // what "die" does besides stopping the kernel
	cancel context.CancelFunc

	shell, control, stdin, iopub, hb zmq4.Socket
	pubMu                            sync.Mutex
	mu                               sync.Mutex
	interrupt                        chan struct{} // of the execution running
	codes                            []string
	interrupts                       int
	stopOnce                         sync.Once
	release                          func() // after the sockets close: frees what their path goes through
}

func startFakeKernel(conn jupyter.Connection, hostPrefix string, deaf bool, dies func()) (*fakeKernel, error) {
	ctx, cancel := context.WithCancel(context.Background())
	k := &fakeKernel{key: []byte(conn.Key), deaf: deaf, dies: dies, cancel: cancel,
		shell: zmq4.NewRouter(ctx), control: zmq4.NewRouter(ctx), stdin: zmq4.NewRouter(ctx), iopub: zmq4.NewPub(ctx), hb: zmq4.NewRep(ctx)}
	for _, b := range []struct {
		s    zmq4.Socket
		port int
	}{{k.shell, conn.ShellPort}, {k.control, conn.ControlPort}, {k.stdin, conn.StdinPort}, {k.iopub, conn.IOPubPort}, {k.hb, conn.HBPort}} {
		if err := b.s.Listen(conn.Endpoint(hostPrefix, b.port)); err != nil {
			k.stop()
			return nil, err
		}
	}
	go k.serve(k.shell)
	go k.serve(k.control)
	go func() {
		for {
			m, err := k.hb.Recv()
			if err != nil || k.hb.Send(m) != nil {
				return
			}
		}
	}()
	return k, nil
}

func (k *fakeKernel) stop() {
	k.stopOnce.Do(func() {
		k.cancel()
		for _, s := range []zmq4.Socket{k.shell, k.control, k.stdin, k.iopub, k.hb} {
			s.Close()
		}
		if k.release != nil {
			k.release()
		}
	})
}

func (k *fakeKernel) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, k.key)
	for _, p := range parts {
		m.Write(p)
	}
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

type wireMsg struct {
	ids     [][]byte
	header  jupyter.Header
	content map[string]any
}

func (k *fakeKernel) frames(ids [][]byte, parent jupyter.Header, msgType string, content any) [][]byte {
	id := make([]byte, 8)
	rand.Read(id)
	h, _ := json.Marshal(jupyter.Header{MsgID: hex.EncodeToString(id), Session: "fake", MsgType: msgType, Version: "5.3"})
	p, _ := json.Marshal(parent)
	c, _ := json.Marshal(content)
	md := []byte("{}")
	out := append([][]byte{}, ids...)
	return append(out, []byte("<IDS|MSG>"), k.sign(h, p, md, c), h, p, md, c)
}

func (k *fakeKernel) reply(s zmq4.Socket, m wireMsg, msgType string, content any) {
	s.Send(zmq4.NewMsgFrom(k.frames(m.ids, m.header, msgType, content)...))
}

func (k *fakeKernel) publish(parent jupyter.Header, msgType string, content any) {
	k.pubMu.Lock()
	defer k.pubMu.Unlock()
	k.iopub.Send(zmq4.NewMsgFrom(k.frames(nil, parent, msgType, content)...))
}

func (k *fakeKernel) serve(s zmq4.Socket) {
	for {
		raw, err := s.Recv()
		if err != nil {
			return
		}
		i := 0
		for i < len(raw.Frames) && string(raw.Frames[i]) != "<IDS|MSG>" {
			i++
		}
		if len(raw.Frames)-i < 6 || !hmac.Equal(raw.Frames[i+1], k.sign(raw.Frames[i+2:i+6]...)) {
			continue // unsigned or malformed: a real kernel drops it too
		}
		m := wireMsg{ids: raw.Frames[:i]}
		json.Unmarshal(raw.Frames[i+2], &m.header)
		json.Unmarshal(raw.Frames[i+5], &m.content)
		switch m.header.MsgType {
		case "kernel_info_request":
			k.publish(m.header, "status", map[string]any{"execution_state": "idle"})
			k.reply(s, m, "kernel_info_reply", map[string]any{"status": "ok", "implementation": "fake"})
		case "execute_request":
			go k.execute(s, m)
		case "interrupt_request":
			k.mu.Lock()
			k.interrupts++
			ch := k.interrupt
			k.mu.Unlock()
			if k.deaf {
				continue
			}
			k.reply(s, m, "interrupt_reply", map[string]any{"status": "ok"})
			if ch != nil {
				close(ch)
				k.mu.Lock()
				k.interrupt = nil
				k.mu.Unlock()
			}
		case "shutdown_request":
			k.reply(s, m, "shutdown_reply", map[string]any{"status": "ok"})
		}
	}
}

// interruptNow interrupts the running execution as SIGINT would.
func (k *fakeKernel) interruptNow() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.interrupts++
	if k.interrupt != nil && !k.deaf {
		close(k.interrupt)
		k.interrupt = nil
	}
}

func (k *fakeKernel) execute(s zmq4.Socket, m wireMsg) {
	code, _ := m.content["code"].(string)
	k.mu.Lock()
	k.codes = append(k.codes, code)
	intr := make(chan struct{})
	k.interrupt = intr
	k.mu.Unlock()
	p := m.header
	k.publish(p, "status", map[string]any{"execution_state": "busy"})
	status := map[string]any{"status": "ok", "execution_count": len(k.codes)}
	switch code {
	case "error":
		status = map[string]any{"status": "error", "ename": "ZeroDivisionError", "evalue": "division by \x1b[0;31mzero\x1b[0m",
			"traceback": []string{"\x1b[0;31mTraceback\x1b[0m", "line 3"}}
	case "abort":
		status = map[string]any{"status": "aborted"}
	case "sleep":
		k.publish(p, "stream", map[string]any{"name": "stdout", "text": "started\n"})
		<-intr
		status = map[string]any{"status": "error", "ename": "KeyboardInterrupt", "evalue": "", "traceback": []string{}}
	case "die":
		k.publish(p, "stream", map[string]any{"name": "stdout", "text": "dying\n"})
		if k.dies != nil {
			k.dies()
		}
		k.stop()
		return
	case "inspect":
		k.publish(p, "stream", map[string]any{"name": "stdout", "text": "noise\n" + InspectMarker +
			`[{"name":"x","type":"int","size":28,"repr":"41","details":{"k":1}}]` + "\n"})
	case "inspect-bad":
		k.publish(p, "stream", map[string]any{"name": "stdout", "text": InspectMarker + "[{not json\n"})
	case "silent":
	default:
		k.publish(p, "stream", map[string]any{"name": "stdout", "text": code + "\n"})
		k.publish(p, "execute_result", map[string]any{"data": map[string]any{"text/plain": "42"}})
	}
	k.reply(s, m, "execute_reply", status)
	k.publish(p, "status", map[string]any{"execution_state": "idle"})
}

// fakeHost is host.Host for the kernel backend: a container is a fake
// kernel started on the connection file the backend wrote into its
// workspace, whose ipc sockets are where the backend dials them.
type fakeHost struct {
	base string

	mu         sync.Mutex
	ctrs       map[string]*fakeCtr
	next       int
	intents    []host.Intent
	removed    []string
	removedWS  []string
	signals    []string
	events     []host.Event
	createErr  error
	startErr   error
	noKernel   bool // containers start but run no kernel, and end at once
	deaf       bool // kernels ignore interrupt_request
	createHook func()
	claims     map[string]string // container → the sandbox grant it was claimed for
	claimErr   error
}

type fakeCtr struct {
	in        host.Intent
	workspace string
	kernel    *fakeKernel
	running   bool
	oom       bool
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	// Short: unix socket paths are limited to 107 bytes.
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{base: base, ctrs: map[string]*fakeCtr{}}
	t.Cleanup(func() {
		h.mu.Lock()
		for _, c := range h.ctrs {
			if c.kernel != nil {
				c.kernel.stop()
			}
		}
		h.mu.Unlock()
		os.RemoveAll(base)
	})
	return h
}

func (h *fakeHost) Sandbox() host.Sandbox { return h }
func (h *fakeHost) Audit() host.Audit     { return h }

func (h *fakeHost) Record(_ context.Context, e host.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
	return nil
}

func (h *fakeHost) Create(_ context.Context, in host.Intent) (host.Container, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.createHook != nil {
		h.createHook()
	}
	h.intents = append(h.intents, in)
	if h.createErr != nil {
		return host.Container{}, h.createErr
	}
	h.next++
	id := fmt.Sprintf("c%d", h.next)
	ws := filepath.Join(h.base, in.SessionID)
	for name, data := range in.Files {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return host.Container{}, err
		}
	}
	for _, m := range in.Mounts {
		os.MkdirAll(filepath.Join(ws, m.Subdir), 0o755)
	}
	h.ctrs[id] = &fakeCtr{in: in, workspace: ws}
	return host.Container{ID: id}, nil
}

func (h *fakeHost) get(id string) (*fakeCtr, error) {
	c := h.ctrs[id]
	if c == nil {
		return nil, host.Errorf(host.KindNotFound, "no container %s", id)
	}
	return c, nil
}

func (h *fakeHost) Start(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := h.get(id)
	if err != nil {
		return err
	}
	if h.startErr != nil {
		return h.startErr
	}
	if h.noKernel {
		return nil // started, and ended at once: running stays false
	}
	var sockDir string
	var raw []byte
	for name, data := range c.in.Files {
		sockDir, raw = filepath.Dir(name), data
	}
	var conn jupyter.Connection
	if err := json.Unmarshal(raw, &conn); err != nil {
		return err
	}
	// Bound through the directory's /proc/self/fd link: the workspace's
	// path may be longer than a socket path holds. The fd stays open as
	// long as the kernel: a listener unlinks the path it was bound at when
	// it closes, and a closed fd's number may by then name another test's
	// directory, whose kernel would lose its socket.
	dir, err := unix.Open(filepath.Join(c.workspace, sockDir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	k, err := startFakeKernel(conn, fmt.Sprintf("/proc/self/fd/%d/k", dir), h.deaf, func() {
		h.mu.Lock()
		c.running, c.oom = false, true
		h.mu.Unlock()
	})
	if err != nil {
		unix.Close(dir)
		return err
	}
	k.release = func() { unix.Close(dir) }
	c.kernel, c.running = k, true
	return nil
}

func (h *fakeHost) Wait(context.Context, string, time.Duration) (host.WaitResult, error) {
	return host.WaitResult{}, errors.New("not used by the kernel backend")
}

func (h *fakeHost) State(_ context.Context, id string) (host.State, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := h.get(id)
	if err != nil {
		return host.State{}, err
	}
	switch {
	case c.running:
		return host.State{Running: true}, nil
	case c.oom:
		return host.State{ExitCode: 137, OOMKilled: true, Message: "out of memory"}, nil
	}
	return host.State{ExitCode: 1, Message: "the process exited with code 1"}, nil
}

func (h *fakeHost) Logs(context.Context, string, int64) (host.Output, error) {
	return host.Output{Stderr: []byte("ModuleNotFoundError: ipykernel\n")}, nil
}

func (h *fakeHost) Exec(context.Context, string, host.ExecRequest) (host.ExecResult, error) {
	return host.ExecResult{}, errors.New("not used by the kernel backend")
}

func (h *fakeHost) Signal(_ context.Context, id string, sig host.Signal, _ host.SignalScope) error {
	h.mu.Lock()
	h.signals = append(h.signals, id+":"+string(sig))
	c, err := h.get(id)
	h.mu.Unlock()
	if err != nil {
		return err
	}
	if sig == "INT" && c.kernel != nil {
		c.kernel.interruptNow()
	}
	return nil
}

func (h *fakeHost) Stop(context.Context, string, time.Duration) error { return nil }

func (h *fakeHost) Remove(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, err := h.get(id)
	if err != nil {
		if slices.Contains(h.removed, id) {
			return nil // as the core: removing a removed container succeeds
		}
		return err
	}
	if c.kernel != nil {
		c.kernel.stop()
	}
	delete(h.ctrs, id)
	h.removed = append(h.removed, id)
	return nil
}

func (h *fakeHost) ReadFiles(context.Context, string, string, int64, int64) ([]host.File, error) {
	return nil, nil
}
func (h *fakeHost) PutFile(context.Context, string, string, []byte) error { return nil }
func (h *fakeHost) GetFile(context.Context, string, string, int64) ([]byte, error) {
	return nil, nil
}

func (h *fakeHost) Clamp(context.Context, string) error { return nil }

func (h *fakeHost) Claim(_ context.Context, id, grant string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.ctrs[id]
	switch {
	case h.claimErr != nil:
		return h.claimErr
	case !ok:
		return host.Errorf(host.KindNotFound, "no container %s", id)
	case c.in.SandboxGrant == "" || h.claims[id] != "":
		return host.Errorf(host.KindPolicy, "container %s may not be claimed", id)
	}
	if h.claims == nil {
		h.claims = map[string]string{}
	}
	h.claims[id] = grant
	return nil
}

func (h *fakeHost) RemoveWorkspace(_ context.Context, sessionID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removedWS = append(h.removedWS, sessionID)
	return os.RemoveAll(filepath.Join(h.base, sessionID))
}

// live lists the containers not removed.
// Dial reaches the fake kernel's socket at the endpoint's place in the
// workspace, as the core does.
func (h *fakeHost) Dial(ctx context.Context, id, endpoint string) (net.Conn, error) {
	h.mu.Lock()
	c, err := h.get(id)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	places, err := host.EndpointPlaces(c.in)
	if err != nil {
		return nil, err
	}
	rel, ok := places[endpoint]
	if !ok {
		return nil, host.Errorf(host.KindNotFound, "container %s declares no endpoint %q", id, endpoint)
	}
	dir, err := unix.Open(filepath.Join(c.workspace, filepath.Dir(rel)), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, host.Errorf(host.KindUnavailable, "endpoint %q: %v", endpoint, err)
	}
	defer unix.Close(dir)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(rel)))
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return nil, host.Errorf(host.KindUnavailable, "endpoint %q: %v", endpoint, err)
	}
	return conn, err
}

func (h *fakeHost) live() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for id := range h.ctrs {
		ids = append(ids, id)
	}
	return ids
}

func (h *fakeHost) kernelOf(id string) *fakeKernel {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.ctrs[id]; c != nil {
		return c.kernel
	}
	return nil
}

func (h *fakeHost) set(f func(h *fakeHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *fakeHost) snapshot() (intents []host.Intent, removed, removedWS, signals []string, events []host.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]host.Intent(nil), h.intents...), append([]string(nil), h.removed...), append([]string(nil), h.removedWS...),
		append([]string(nil), h.signals...), append([]host.Event(nil), h.events...)
}

var _ host.Host = (*fakeHost)(nil)

func hasPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
