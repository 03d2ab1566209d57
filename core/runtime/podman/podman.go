// Package podman implements runtime.Runtime with Podman's v5 Go bindings. It
// is the only package in MCP-Forge that talks to Podman.
package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/specgen"
	dockerContainer "github.com/docker/docker/api/types/container"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/idtools"
	storagetypes "go.podman.io/storage/types"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// MinAPIVersion is the oldest Podman service we have tested against.
const MinAPIVersion = "4.3.0"

// Client is a lazily connected Podman API client.
type Client struct {
	configured string
	getenv     func(string) string

	mu     sync.Mutex
	conn   context.Context
	socket string
	rl     rootlessState // rootless.go
}

var _ runtime.Runtime = (*Client)(nil)

// New returns a client that connects on first use; socket may be empty.
func New(socket string) *Client { return &Client{configured: socket, getenv: os.Getenv} }

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
		return runtime.Info{}, fmt.Errorf("podman info: %w", err)
	}
	out := runtime.Info{
		Socket:      c.socket,
		Version:     info.Version.Version,
		APIVersion:  info.Version.APIVersion,
		OCIRuntime:  info.Host.OCIRuntime.Name,
		CgroupsV2:   info.Host.CgroupsVersion == "v2",
		Rootless:    info.Host.Security.Rootless,
		CgroupsMode: info.Host.CgroupsVersion,
	}
	if runtime.VersionBelow(out.Version, MinAPIVersion) {
		return out, fmt.Errorf("Podman %s is older than the supported %s; upgrade podman", out.Version, MinAPIVersion)
	}
	return out, nil
}

// toSpecgen translates a policy-checked spec.
func toSpecgen(s runtime.Spec) *specgen.SpecGenerator {
	t, f := true, false
	g := specgen.NewSpecGenerator(s.Image, false)
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
	return g
}

// Create makes the container; it does not start it.
func (c *Client) Create(ctx context.Context, s runtime.Spec) (string, error) {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return "", err
	}
	g := toSpecgen(s)
	// rootless.go: a rootless service reads ID maps in the user's namespace.
	if rl, err := c.isRootless(cx); err != nil {
		return "", err
	} else if rl {
		adaptRootless(g, s)
	}
	resp, err := containers.CreateWithSpec(cx, g, nil)
	if err != nil {
		return "", fmt.Errorf("podman create from %s: %w", s.Image, hint(err))
	}
	return resp.ID, nil
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
	if err := containers.Start(cx, id, nil); err != nil {
		return fmt.Errorf("podman start: %w", hint(err))
	}
	return nil
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
		return -1, fmt.Errorf("podman wait: the Podman service did not answer in time (%w); check it with `podman ps`", err)
	}
	if wctx.Err() != nil {
		c.kill(id)
		return -1, runtime.ErrTimeout
	}
	return -1, fmt.Errorf("podman wait: %w", err)
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
		return false, 0, fmt.Errorf("podman inspect: %w", err)
	}
	if data.State == nil {
		return false, 0, fmt.Errorf("podman inspect %s: no state", id)
	}
	return data.State.Running || data.State.Status == "created" || data.State.Status == "initialized", int(data.State.ExitCode), nil
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	buf   bytes.Buffer
	max   int64
	total int64
}

func (w *capped) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - int64(w.buf.Len()); room > 0 {
		if int64(len(p)) > room {
			w.buf.Write(p[:room])
		} else {
			w.buf.Write(p)
		}
	}
	return len(p), nil
}

// Logs returns stdout and stderr separately, each capped at max bytes.
func (c *Client) Logs(ctx context.Context, id string, max int64) (runtime.Output, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return runtime.Output{}, err
	}
	out, errw := &capped{max: max}, &capped{max: max}
	// The bindings never close these channels: drain them until Logs returns.
	so, se := make(chan string, 64), make(chan string, 64)
	var wg sync.WaitGroup
	drain := func(ch chan string, w *capped) {
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
		return runtime.Output{}, fmt.Errorf("podman logs: %w", err)
	}
	return runtime.Output{Stdout: out.buf.Bytes(), Stderr: errw.buf.Bytes(), StdoutTotal: out.total, StderrTotal: errw.total}, nil
}

// Exec runs cmd in a running container.
func (c *Client) Exec(ctx context.Context, id string, cmd []string, max int64) (runtime.ExecResult, error) {
	cx, err := c.ctx(ctx)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	sid, err := containers.ExecCreate(cx, id, &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: cmd, AttachStdout: true, AttachStderr: true,
	}})
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("podman exec create: %w", err)
	}
	defer containers.ExecRemove(cx, sid, nil)
	out, errw := &capped{max: max}, &capped{max: max}
	var ow, ew io.Writer = out, errw
	t := true
	if err := containers.ExecStartAndAttach(cx, sid, &containers.ExecStartAndAttachOptions{
		OutputStream: &ow, ErrorStream: &ew, AttachOutput: &t, AttachError: &t,
	}); err != nil {
		return runtime.ExecResult{}, fmt.Errorf("podman exec: %w", err)
	}
	insp, err := containers.ExecInspect(cx, sid, nil)
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("podman exec inspect: %w", err)
	}
	return runtime.ExecResult{ExitCode: insp.ExitCode, Output: runtime.Output{
		Stdout: out.buf.Bytes(), Stderr: errw.buf.Bytes(), StdoutTotal: out.total, StderrTotal: errw.total}}, nil
}

// Signal sends a signal ("INT", "TERM", "KILL") to the container's init.
func (c *Client) Signal(ctx context.Context, id, sig string) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	if err := containers.Kill(cx, id, new(containers.KillOptions).WithSignal(sig)); err != nil {
		return fmt.Errorf("podman kill -s %s: %w", sig, err)
	}
	return nil
}

// Stop stops the container, killing it after grace.
func (c *Client) Stop(ctx context.Context, id string, grace time.Duration) error {
	cx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return err
	}
	if err := containers.Stop(cx, id, new(containers.StopOptions).WithTimeout(uint(grace.Seconds()))); err != nil {
		return fmt.Errorf("podman stop: %w", err)
	}
	return nil
}

// Remove force-removes the container and its anonymous volumes. A container
// that is already gone counts as removed. Right after a container exits,
// Podman's own cleanup may still hold its /dev/shm mount ("device or
// resource busy"); that is retried with a short backoff.
func (c *Client) Remove(ctx context.Context, id string) error {
	delay := 25 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := c.remove(ctx, id)
		if err == nil || attempt == 6 || ctx.Err() != nil {
			return err
		}
		time.Sleep(delay)
		delay *= 2
	}
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
		return fmt.Errorf("podman rm: %w", err)
	}
	for _, r := range reports {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "no such container") {
			return fmt.Errorf("podman rm %s: %w", r.Id, r.Err)
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
		return nil, fmt.Errorf("podman ps: %w", err)
	}
	out := make([]runtime.Container, 0, len(list))
	for _, l := range list {
		name := ""
		if len(l.Names) > 0 {
			name = l.Names[0]
		}
		out = append(out, runtime.Container{ID: l.ID, Name: name, Image: l.Image, State: l.State, Created: l.Created, Labels: l.Labels})
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
	exists, err := images.Exists(cx, name, nil)
	if err != nil {
		return runtime.ImageInfo{}, false, fmt.Errorf("podman image exists: %w", err)
	}
	if !exists {
		return runtime.ImageInfo{}, false, nil
	}
	data, err := images.GetImage(cx, name, nil)
	if err != nil {
		return runtime.ImageInfo{}, false, fmt.Errorf("podman image inspect: %w", err)
	}
	return runtime.ImageInfo{ID: data.ID, Size: data.Size, Labels: data.Labels}, true, nil
}
