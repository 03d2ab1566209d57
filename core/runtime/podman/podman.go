// Package podman implements runtime.Runtime with Podman's v5 Go bindings. It
// is the only package in MCP-Forge that talks to Podman.
package podman

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	dockerContainer "github.com/docker/docker/api/types/container"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/idtools"
	storagetypes "go.podman.io/storage/types"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
)

// MinAPIVersion is the oldest Podman service we have tested against.
const MinAPIVersion = "4.3.0"

// Client is a lazily connected Podman API client. A service that stops
// answering is reconnected to on the next call.
type Client struct {
	configured string
	getenv     func(string) string
	kmsg       func() ([]kmsgRecord, error) // the kernel log, for OOM kills
	agent      string                       // the host's mcp-forge-agent (WithAgent)
	gvisor     *gvisor                      // how sandboxes run under gVisor (WithGVisor); nil: they cannot

	mu     sync.Mutex
	conn   context.Context
	socket string
	envs   map[string]*runtime.Scrubber // container id → its environment, kept out of errors
	rl     rootlessState                // rootless.go
}

var _ runtime.Runtime = (*Client)(nil)

// New returns a client that connects on first use; socket may be empty.
func New(socket string) *Client {
	return &Client{configured: socket, getenv: os.Getenv, envs: map[string]*runtime.Scrubber{},
		kmsg: func() ([]kmsgRecord, error) { return readKmsg("/dev/kmsg") }}
}

// WithAgent names the host's mcp-forge-agent (a static binary), which every
// sandbox then has read-only at agent.Path, as a Kubernetes pod has its own
// copy there; empty: none (a command that needs it is refused at create).
func (c *Client) WithAgent(path string) *Client {
	c.agent = path
	return c
}

// mountAgent adds the agent's mount to g, or refuses a command that starts
// with the agent when there is none to mount. No "U" option: a user
// namespace must not chown the core's own binary; its mode (0755) lets
// any mapped user run it.
func (c *Client) mountAgent(g *specgen.SpecGenerator, s runtime.Spec) error {
	if c.agent == "" {
		if len(s.Command) > 0 && s.Command[0] == agent.Path {
			return fmt.Errorf("podman create from %s: the command needs %s (network by host name), and this server has none: "+
				"build it beside the server's plugins (make build, make install) and restart the server", s.Image, agent.Binary)
		}
		return nil
	}
	g.Mounts = append(g.Mounts, spec.Mount{Destination: agent.Path, Type: "bind", Source: c.agent, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	return nil
}

// opTimeout bounds every API call that should return promptly, so that a
// wedged Podman service surfaces as an error instead of a hung server.
const opTimeout = 90 * time.Second

// op is ctx for a call expected to return promptly.
func (c *Client) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	tctx, cancel := context.WithTimeout(cx, opTimeout)
	return tctx, cancel, nil
}

func (c *Client) ctx(ctx context.Context) (context.Context, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		sock, err := Discover(c.configured, c.getenv)
		if err != nil {
			return nil, err
		}
		conn, err := bindings.NewConnection(context.Background(), sock)
		if err != nil {
			return nil, fmt.Errorf("connect to Podman at %s: %w (is the service running? `make setup` starts it)", sock, err)
		}
		c.conn, c.socket = conn, sock
	}
	// The bindings keep the connection in the context; derive from the
	// caller's ctx for cancellation.
	return mergeCtx(ctx, c.conn), nil
}

// fail turns an error of an operation on container id into what callers
// see: the container's environment scrubbed out, and a service that does not
// answer named as such (and reconnected to next time).
func (c *Client) fail(id, op string, err error) error {
	if err == nil {
		return nil
	}
	if unavailable(err) {
		c.mu.Lock()
		sock := c.socket
		c.conn = nil // a restarted service gets a fresh connection
		c.mu.Unlock()
		err = fmt.Errorf("%s: cannot connect to Podman at %s: the service is not answering (%w); start it again (`make setup` does), `mcp-forge doctor` checks it", op, strings.TrimPrefix(sock, "unix://"), err)
	} else {
		err = fmt.Errorf("%s: %w", op, err)
	}
	c.mu.Lock()
	sc := c.envs[id]
	c.mu.Unlock()
	return sc.Error(err)
}

// unavailable reports an error that means the service is gone, not that it
// refused the request.
func unavailable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "dial unix", "unexpected EOF", ": EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// mergeCtx carries conn's values with ctx's deadline and cancellation.
func mergeCtx(ctx, conn context.Context) context.Context {
	return valueCtx{Context: ctx, values: conn}
}

type valueCtx struct {
	context.Context
	values context.Context
}

func (v valueCtx) Value(key any) any {
	if x := v.values.Value(key); x != nil {
		return x
	}
	return v.Context.Value(key)
}

// Info pings the service and reports what doctor needs.
func (c *Client) Info(ctx context.Context) (runtime.Info, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return runtime.Info{}, err
	}
	info, err := system.Info(cx, nil)
	if err != nil {
		return runtime.Info{}, c.fail("", "podman info", err)
	}
	out := runtime.Info{
		Engine:      "Podman",
		Socket:      c.socket,
		Version:     info.Version.Version,
		APIVersion:  info.Version.APIVersion,
		OCIRuntime:  info.Host.OCIRuntime.Name,
		CgroupsV2:   info.Host.CgroupsVersion == "v2",
		Rootless:    info.Host.Security.Rootless,
		CgroupsMode: info.Host.CgroupsVersion,
	}
	if runtime.VersionBelow(out.Version, MinAPIVersion) {
		return out, fmt.Errorf("podman %s is older than the supported %s; upgrade podman", out.Version, MinAPIVersion)
	}
	return out, nil
}

// toSpecgen translates a policy-checked spec.
func toSpecgen(s runtime.Spec) *specgen.SpecGenerator {
	t, f := true, false
	// From the ID the policy approved, not the name: a tag moved after the
	// check cannot change what runs. RawImageName keeps the name for `podman ps`.
	g := specgen.NewSpecGenerator(s.ImageID, false)
	g.RawImageName = s.Image
	g.SeccompProfilePath = s.SeccompProfile
	g.Annotations = map[string]string{define.InspectAnnotationSeccomp: s.SeccompProfile} // shown by podman inspect, as the CLI does
	g.Name = s.Name
	g.Command = s.Command
	g.Env = s.Env
	g.WorkDir = s.WorkDir
	g.Labels = s.Labels
	g.User = s.User
	g.Init = &t
	g.ReadOnlyFilesystem = &t
	g.ReadWriteTmpfs = &f
	g.NoNewPrivileges = &t
	g.Privileged = &f
	g.CapDrop = s.CapDrop
	g.Remove = &f
	g.Terminal = &f
	if s.Network == "none" {
		g.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	} else {
		g.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	}
	switch s.UserNS {
	case "auto":
		// The service needs the mapping options too, as the CLI would send.
		g.UserNS = specgen.Namespace{NSMode: specgen.Auto}
		g.IDMappings = &storagetypes.IDMappingOptions{AutoUserNs: true}
	case "private":
		m := []idtools.IDMap{{ContainerID: 0, HostID: int(s.UserNSStart), Size: runtime.UserNSSize}}
		g.UserNS = specgen.Namespace{NSMode: specgen.Private}
		g.IDMappings = &storagetypes.IDMappingOptions{UIDMap: m, GIDMap: m}
	}
	mem, cpu, period, pids := s.Limits.MemoryBytes, s.Limits.CPUQuota, uint64(100000), s.Limits.Pids
	swap := mem // memory+swap equal to memory: no swap
	g.ResourceLimits = &spec.LinuxResources{
		Memory: &spec.LinuxMemory{Limit: &mem, Swap: &swap},
		CPU:    &spec.LinuxCPU{Quota: &cpu, Period: &period},
		Pids:   &spec.LinuxPids{Limit: pids},
	}
	// Short names: the service prefixes RLIMIT_ itself.
	// Podman's default nproc and nofile exceed this kind of host's hard limits
	// and runc then fails; nproc equal to the pids limit is a second fence.
	nofile, nproc := uint64(s.Limits.NoFile), uint64(s.Limits.Pids)
	g.Rlimits = []spec.POSIXRlimit{{Type: "nofile", Soft: nofile, Hard: nofile}, {Type: "nproc", Soft: nproc, Hard: nproc}}
	g.Mounts = []spec.Mount{{
		Destination: "/tmp", Type: "tmpfs", Source: "tmpfs",
		Options: []string{"rw", "nosuid", "nodev", "size=" + strconv.FormatInt(s.TmpfsSize, 10), "mode=1777"},
	}}
	for _, m := range s.Mounts {
		if m.HostRoot {
			// Not rbind: a filesystem mounted beneath the user's directory
			// stays out. Not U: the user's files keep their owner, and
			// the sandbox reads what others may read.
			g.Mounts = append(g.Mounts, spec.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
			continue
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		if s.UserNS != "" {
			opts = append(opts, "U") // chown to the container's mapped user
		}
		g.Mounts = append(g.Mounts, spec.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
	}
	// Keep a bounded log on disk whatever the program prints.
	g.LogConfiguration = &specgen.LogConfig{Driver: "k8s-file", Size: 8 << 20}
	// A run's container is killed by conmon past its timeout even if the
	// server and its watchdog are both gone.
	if s.Labels[runtime.LabelOneShot] == "true" && s.Limits.Timeout > 0 {
		g.Timeout = uint((s.Limits.Timeout + LifetimeGrace).Seconds())
	}
	return g
}

// LifetimeGrace is how long a one-shot container may outlive its timeout
// (the server kills it at the timeout; conmon after this grace).
const LifetimeGrace = time.Minute

// Create makes the container; it does not start it.
func (c *Client) Create(ctx context.Context, s runtime.Spec) (string, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return "", err
	}
	if s.ImageID == "" || s.SeccompProfile == "" {
		return "", fmt.Errorf("podman create from %s: the spec lacks a resolved image ID or a seccomp profile; refusing to fall back to Podman's defaults", s.Image)
	}
	g := toSpecgen(s)
	if err := c.mountAgent(g, s); err != nil {
		return "", err
	}
	// rootless.go: a rootless service reads ID maps in the user's namespace.
	st, err := c.serviceState(cx)
	if err != nil {
		return "", err
	} else if st.rootless {
		adaptRootless(g, s)
	}
	ccx, err := c.isolate(cx, g, s, st)
	if err != nil {
		return "", err
	}
	resp, err := containers.CreateWithSpec(ccx, g, nil)
	// Names too: errors reach the audit log, where a name may be a secret.
	sc := runtime.NewScrubber(s.Env, true)
	if err != nil {
		return "", sc.Error(c.fail("", "podman create from "+s.Image, hint(err)))
	}
	if len(s.Env) > 0 {
		c.mu.Lock()
		c.envs[resp.ID] = sc
		c.mu.Unlock()
	}
	return resp.ID, nil
}

func hintErr(err error) error {
	if err == nil {
		return nil
	}
	return hint(err)
}

func hint(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "image not known") || strings.Contains(msg, "no such image"):
		return fmt.Errorf("%w (build the sandbox images with `make images`)", err)
	case strings.Contains(msg, "rlimit"):
		return fmt.Errorf("%w (a container rlimit exceeds the Podman service's hard limit: lower execution.nofile or execution.max_pids)", err)
	case strings.Contains(msg, "cgroups in hybrid mode"):
		return fmt.Errorf("%w (crun cannot run here: set [engine] runtime = \"runc\" in containers.conf; `make setup` does)", err)
	case strings.Contains(msg, "subuid") || strings.Contains(msg, "no available UID"):
		return fmt.Errorf("%w (userns=auto needs a `containers:2147483647:2147483648` line in /etc/subuid and /etc/subgid; `make setup` adds it)", err)
	}
	return err
}

// Start starts a created container.
func (c *Client) Start(ctx context.Context, id string) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	return c.fail(id, "podman start", hintErr(containers.Start(cx, id, nil)))
}

// Wait polls every 10 ms (the default 250 ms adds a quarter second to every run).
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (int, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return -1, err
	}
	wctx, cancel := context.WithTimeout(cx, timeout)
	defer cancel()
	opts := new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}).WithInterval("10ms")
	code, err := containers.Wait(wctx, id, opts)
	if err == nil {
		return int(code), nil
	}
	if ctx.Err() != nil {
		c.kill(id)
		return -1, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) && wctx.Err() == nil {
		return -1, c.fail(id, "podman wait", fmt.Errorf("the Podman service did not answer in time (%w); check it with `podman ps`", err))
	}
	if wctx.Err() != nil {
		c.kill(id)
		return -1, runtime.ErrTimeout
	}
	return -1, c.fail(id, "podman wait", err)
}

func (c *Client) kill(id string) {
	kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cx, err := c.ctx(kctx)
	if err != nil {
		return
	}
	_ = containers.Kill(cx, id, new(containers.KillOptions).WithSignal("KILL"))
	_, _ = containers.Wait(cx, id, new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateExited, define.ContainerStateStopped}).WithInterval("10ms"))
}

// State inspects the container without waiting.
func (c *Client) State(ctx context.Context, id string) (bool, int, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return false, 0, err
	}
	data, err := containers.Inspect(cx, id, nil)
	if err != nil {
		return false, 0, c.fail(id, "podman inspect", err)
	}
	if data.State == nil {
		return false, 0, fmt.Errorf("podman inspect %s: no state", id)
	}
	return data.State.Running || data.State.Status == "created" || data.State.Status == "initialized", int(data.State.ExitCode), nil
}

// OOMKilled asks Podman, then the kernel log, whether the kernel's OOM
// killer killed a process of the exited container shortly before it ended.
// The kernel log is only meaningful for a local engine.
func (c *Client) OOMKilled(ctx context.Context, id string) (runtime.OOMVerdict, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return runtime.OOMUnknown, err
	}
	data, err := containers.Inspect(cx, id, nil)
	if err != nil {
		return runtime.OOMUnknown, c.fail(id, "podman inspect", err)
	}
	if data.State == nil {
		return runtime.OOMUnknown, fmt.Errorf("podman inspect %s: no state", id)
	}
	if data.State.OOMKilled {
		return runtime.OOMKill, nil
	}
	c.mu.Lock()
	local := strings.HasPrefix(c.socket, "unix://")
	c.mu.Unlock()
	if !local || c.kmsg == nil {
		return runtime.OOMUnknown, nil
	}
	records, err := c.kmsg()
	if err != nil {
		return runtime.OOMUnknown, nil // not root, or no /dev/kmsg: no signal
	}
	return oomVerdict(records, data.ID, sinceBoot(data.State.FinishedAt)), nil
}

// Logs returns stdout and stderr separately, each capped at max bytes.
func (c *Client) Logs(ctx context.Context, id string, max int64) (runtime.Output, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return runtime.Output{}, err
	}
	out, errw := &runtime.Capped{Max: max}, &runtime.Capped{Max: max}
	// The bindings never close these channels: drain them until Logs returns.
	so, se := make(chan string, 64), make(chan string, 64)
	var wg sync.WaitGroup
	drain := func(ch chan string, w *runtime.Capped) {
		defer wg.Done()
		// Frames carry their own newline; a partial line has none.
		for frame := range ch {
			w.Write([]byte(frame))
		}
	}
	wg.Add(2)
	go drain(so, out)
	go drain(se, errw)
	t := true
	err = containers.Logs(cx, id, &containers.LogOptions{Stdout: &t, Stderr: &t}, so, se)
	close(so)
	close(se)
	wg.Wait()
	if err != nil && !errors.Is(err, io.EOF) {
		return runtime.Output{}, c.fail(id, "podman logs", err)
	}
	return runtime.Output{Stdout: out.Buf.Bytes(), Stderr: errw.Buf.Bytes(), StdoutTotal: out.Total, StderrTotal: errw.Total}, nil
}

// Exec runs a command in a running container, feeding it stdin and copying
// its output to the request's writers as it comes.
func (c *Client) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	sid, err := containers.ExecCreate(cx, id, &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: req.Command, Env: env, WorkingDir: req.WorkDir, AttachStdin: req.Stdin != nil, AttachStdout: true, AttachStderr: true,
	}})
	if err != nil {
		return runtime.ExecResult{}, c.fail(id, "podman exec create", err)
	}
	defer containers.ExecRemove(context.WithoutCancel(cx), sid, nil)
	out, errw, ow, ew := runtime.ExecStreams(req)
	t := true
	opts := &containers.ExecStartAndAttachOptions{OutputStream: &ow, ErrorStream: &ew, AttachOutput: &t, AttachError: &t}
	if req.Stdin != nil {
		opts.InputStream = bufio.NewReader(bytes.NewReader(req.Stdin))
		opts.AttachInput = &t
	}
	done := make(chan struct{})
	var timedOut atomic.Bool
	var bounder sync.WaitGroup
	var boundErr error
	if req.Timeout > 0 {
		bounder.Add(1)
		go func() {
			defer bounder.Done()
			boundErr = boundExec(cx, sid, req.Timeout, done, &timedOut)
		}()
	}
	err = containers.ExecStartAndAttach(cx, sid, opts)
	close(done)
	bounder.Wait()
	if boundErr != nil {
		return runtime.ExecResult{}, c.fail(id, "podman exec", boundErr)
	}
	if err != nil {
		return runtime.ExecResult{}, c.fail(id, "podman exec", err)
	}
	insp, err := containers.ExecInspect(cx, sid, nil)
	if err != nil {
		return runtime.ExecResult{}, c.fail(id, "podman exec inspect", err)
	}
	return runtime.ExecResult{ExitCode: insp.ExitCode, TimedOut: timedOut.Load(), Output: runtime.OutputOf(out, errw)}, nil
}

// boundExec ends exec session sid past timeout (unless done closes first):
// SIGTERM to its process group, SIGKILL runtime.ExecKillGrace later. Podman
// starts an exec's command as the leader of a session and process group of
// its own, child of conmon on this host, so the group is the command and
// everything it started (a shell's children too) and nothing else; the
// signal comes from the core, so the image needs no timeout(1) or kill. A
// rootless core owns the user namespace the command runs in, so it may
// signal it too.
//
// An error means the command could not be signalled (a Podman service on
// another machine, whose pids are not this host's): the caller's context
// is then the only bound left.
func boundExec(ctx context.Context, sid string, timeout time.Duration, done <-chan struct{}, timedOut *atomic.Bool) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return nil
	case <-t.C:
	}
	insp, err := containers.ExecInspect(ctx, sid, nil)
	if err != nil || !insp.Running || insp.Pid <= 0 {
		return nil // it ended meanwhile
	}
	// Only the command's own group: were its pid not a group leader (a
	// runtime that starts execs otherwise), the group would be conmon's.
	target := insp.Pid
	if pg, err := syscall.Getpgid(insp.Pid); err == nil && pg == insp.Pid {
		target = -insp.Pid
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-done:
			return nil
		default:
		}
		if err := syscall.Kill(target, sig); err != nil {
			return fmt.Errorf("the command ran past its %s timeout and could not be sent %v (pid %d): %w", timeout, sig, insp.Pid, err)
		}
		timedOut.Store(true)
		select {
		case <-done:
			return nil
		case <-time.After(runtime.ExecKillGrace):
		}
	}
	return nil
}

// Signal sends a signal ("INT", "TERM", "KILL") to the container's init.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	return c.fail(id, "podman kill -s "+sig, containers.Kill(cx, id, new(containers.KillOptions).WithSignal(sig)))
}

// Stop stops the container, killing it after grace.
func (c *Client) Stop(ctx context.Context, id string, grace time.Duration) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	return c.fail(id, "podman stop", containers.Stop(cx, id, new(containers.StopOptions).WithTimeout(uint(grace.Seconds()))))
}

// Remove force-removes the container and its anonymous volumes. A container
// that is already gone counts as removed. Right after a container exits,
// Podman's own cleanup may still hold its /dev/shm mount ("device or
// resource busy"); that is retried with a short exponential backoff (about
// 1.5 s in all, less if ctx ends first). A service that does not answer is
// not retried here: the caller decides when to try again.
func (c *Client) Remove(ctx context.Context, id string) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.RandomizationFactor, b.MaxInterval = 25*time.Millisecond, 2, 0.2, time.Second
	var last error
	err := backoff.Retry(func() error {
		last = c.remove(ctx, id)
		if last != nil && unavailable(last) {
			return backoff.Permanent(last)
		}
		return last
	}, backoff.WithContext(backoff.WithMaxRetries(b, 6), ctx))
	if err != nil && last != nil {
		err = last // the cause, rather than the context's end
	}
	if err != nil {
		return c.fail(id, "podman rm", err)
	}
	c.mu.Lock()
	delete(c.envs, id)
	c.mu.Unlock()
	return nil
}

func (c *Client) remove(ctx context.Context, id string) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	reports, err := containers.Remove(cx, id, new(containers.RemoveOptions).WithForce(true).WithVolumes(true).WithTimeout(0))
	if err != nil {
		if strings.Contains(err.Error(), "no such container") {
			return nil
		}
		return err
	}
	for _, r := range reports {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "no such container") {
			return fmt.Errorf("%s: %w", r.Id, r.Err)
		}
	}
	return nil
}

// List returns containers carrying all the given labels, running or not.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, err
	}
	var filt []string
	for k, v := range labels {
		filt = append(filt, k+"="+v)
	}
	list, err := containers.List(cx, new(containers.ListOptions).WithAll(true).WithFilters(map[string][]string{"label": filt}))
	if err != nil {
		return nil, c.fail("", "podman ps", err)
	}
	out := make([]runtime.Container, 0, len(list))
	for _, l := range list {
		name := ""
		if len(l.Names) > 0 {
			name = l.Names[0]
		}
		out = append(out, runtime.Container{ID: l.ID, Name: name, Image: l.Image, ImageID: l.ImageID, State: l.State, Created: l.Created, Labels: l.Labels})
	}
	return out, nil
}

// Image inspects a local image; ok is false when it does not exist.
func (c *Client) Image(ctx context.Context, name string) (runtime.ImageInfo, bool, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return runtime.ImageInfo{}, false, err
	}
	// One call, not exists-then-inspect: every container create resolves its image.
	data, err := images.GetImage(cx, name, nil)
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) && em.ResponseCode == http.StatusNotFound {
		return runtime.ImageInfo{}, false, nil
	}
	if err != nil {
		return runtime.ImageInfo{}, false, c.fail("", "podman image inspect", err)
	}
	digests := append([]string{}, data.RepoDigests...)
	if data.Digest != "" {
		digests = append(digests, data.Digest.String())
	}
	info := runtime.ImageInfo{ID: data.ID, Size: data.Size, Labels: data.Labels, Names: data.RepoTags, Digests: digests}
	if data.Created != nil {
		info.Created = *data.Created
	}
	return info, true, nil
}

// UpdateCPU sets a running container's CPU quota (µs per 100 ms), in
// place: the cgroup holds it when the call returns.
func (c *Client) UpdateCPU(ctx context.Context, id string, quota int64) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	period := uint64(100000)
	_, err = containers.Update(cx, &types.ContainerUpdateOptions{NameOrID: id, Resources: &spec.LinuxResources{CPU: &spec.LinuxCPU{Quota: &quota, Period: &period}}})
	return c.fail(id, "podman update", err)
}
