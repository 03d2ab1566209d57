// Package runtimetest is a scriptable in-memory container runtime for unit
// tests of the logic above core/runtime (sandbox, hostsvc, watchdog,
// engine): it records every call and spec, can fail any call, and runs a
// container's command as a tiny shell, so that the same contract suite
// (RunContract) holds for it and for the Podman runtime. It is a fake: no
// test of confinement or of a feature may rest on it alone.
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// ErrNotFound is what every call about an unknown container returns.
var ErrNotFound = errors.New("no such container")

// Call is one recorded call.
type Call struct {
	Method string // "Create", "Start", …
	ID     string // the container, where the call names one
}

// Runtime implements runtime.Runtime in memory. The zero value is not
// usable: call New.
type Runtime struct {
	mu         sync.Mutex
	info       runtime.Info
	gaps       runtime.Report               // what Guarantees answers: everything enforced unless Lack says
	images     map[string]runtime.ImageInfo // by every name and by ID
	containers map[string]*container
	calls      []Call
	specs      []runtime.Spec
	fail       map[string][]error // method → errors to return, the last one sticky when Always
	sticky     map[string]error
	next       int
	// Exec answers Exec calls in a running container; nil runs the command
	// with the same tiny shell as a container's command.
	ExecHook func(id string, req runtime.ExecRequest) (runtime.ExecResult, error)
}

type container struct {
	c       runtime.Container
	spec    runtime.Spec
	started bool
	running bool
	exit    int
	oom     bool
	out     runtime.Output
	done    chan struct{} // closed when the container exits
	stop    chan struct{} // closed to end a running command early
}

// New returns an empty runtime that knows the given images (by name; the
// ID is derived when empty).
func New(images ...runtime.ImageInfo) *Runtime {
	r := &Runtime{
		info:       runtime.Info{Socket: "unix:///fake/podman.sock", Version: "5.0.0", APIVersion: "5.0.0", OCIRuntime: "fake", CgroupsV2: true},
		images:     map[string]runtime.ImageInfo{},
		containers: map[string]*container{},
		fail:       map[string][]error{},
		sticky:     map[string]error{},
	}
	for _, im := range images {
		r.AddImage(im)
	}
	return r
}

// AddImage makes an image known. Names are stored as given and qualified
// with localhost/ as Podman reports local images.
func (r *Runtime) AddImage(im runtime.ImageInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if im.ID == "" {
		im.ID = fmt.Sprintf("sha256:%064d", len(r.images)+1)
	}
	given := im.Names
	var names []string
	for _, n := range given {
		q := n
		if !strings.Contains(strings.SplitN(n, "/", 2)[0], ".") && !strings.HasPrefix(n, "localhost/") {
			q = "localhost/" + n
		}
		names = append(names, q)
	}
	// Whatever name it is looked up by, the image reports its qualified
	// names, as Podman does (the policy checks them against the allowlist).
	im.Names = names
	for _, n := range append(given, names...) {
		r.images[n] = im
	}
	r.images[im.ID] = im
}

// SetInfo replaces what Info answers.
func (r *Runtime) SetInfo(i runtime.Info) { r.mu.Lock(); r.info = i; r.mu.Unlock() }

// FailNext makes the next call of method return err (queued: several
// calls fail in order).
func (r *Runtime) FailNext(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[method] = append(r.fail[method], err)
}

// FailAlways makes every call of method return err until Heal.
func (r *Runtime) FailAlways(method string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sticky[method] = err
}

// Heal clears every scripted failure.
func (r *Runtime) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail, r.sticky = map[string][]error{}, map[string]error{}
}

// Calls returns the calls made so far, in order.
func (r *Runtime) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Count is how many times method was called.
func (r *Runtime) Count(method string) int {
	n := 0
	for _, c := range r.Calls() {
		if c.Method == method {
			n++
		}
	}
	return n
}

// Specs returns every spec Create was given, in order (also refused ones).
func (r *Runtime) Specs() []runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.Spec(nil), r.specs...)
}

// Live returns the IDs of the containers not removed, sorted.
func (r *Runtime) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id := range r.containers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Exit ends a running container now with code, as if its command exited
// (oom: as if the kernel's OOM killer killed it, code 137).
func (r *Runtime) Exit(id string, code int, oom bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.containers[id]
	if !ok {
		return ErrNotFound
	}
	r.exitLocked(c, code, oom)
	return nil
}

// enter records a call and returns the scripted failure, if any.
func (r *Runtime) enter(method, id string) error {
	r.calls = append(r.calls, Call{method, id})
	if q := r.fail[method]; len(q) > 0 {
		r.fail[method] = q[1:]
		return q[0]
	}
	return r.sticky[method]
}

func (r *Runtime) lookup(id string) (*container, error) {
	if c, ok := r.containers[id]; ok {
		return c, nil
	}
	for full, c := range r.containers { // a unique prefix, as Podman accepts
		if strings.HasPrefix(full, id) && len(id) >= 12 {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
}

func (r *Runtime) exitLocked(c *container, code int, oom bool) {
	if !c.running {
		if !c.started {
			c.started = true
			close(c.done)
		}
		return
	}
	c.running, c.exit, c.oom = false, code, oom
	c.c.State = "exited"
	close(c.stop)
	close(c.done)
}

// Info answers the configured engine description.
func (r *Runtime) Info(context.Context) (runtime.Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Info", ""); err != nil {
		return runtime.Info{}, err
	}
	return r.info, nil
}

// Lack scripts the runtime to report g as not enforced, for why.
func (r *Runtime) Lack(g runtime.Guarantee, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = r.gaps.With(runtime.Gap{Guarantee: g, Why: why, Fix: "(fake runtime: scripted by Lack)"})
}

// Guarantees answers every guarantee enforced but those Lack named.
func (r *Runtime) Guarantees(context.Context) (runtime.Report, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Guarantees", ""); err != nil {
		return runtime.Report{}, err
	}
	return r.gaps.With(), nil
}

// Create records the spec and makes a created container of a known image.
func (r *Runtime) Create(_ context.Context, s runtime.Spec) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, s)
	if err := r.enter("Create", ""); err != nil {
		return "", err
	}
	// As the Podman runtime: never fall back to an engine default for
	// what the policy resolved (the image by ID) or requires (seccomp).
	if s.ImageID == "" || s.SeccompProfile == "" {
		return "", fmt.Errorf("create from %s: the spec lacks a resolved image ID or a seccomp profile", s.Image)
	}
	if _, ok := r.images[s.ImageID]; !ok {
		return "", fmt.Errorf("image %q: image not known", s.ImageID)
	}
	im := r.images[s.ImageID]
	for _, c := range r.containers {
		if s.Name != "" && c.c.Name == s.Name {
			return "", fmt.Errorf("the container name %q is already in use", s.Name)
		}
	}
	r.next++
	id := fmt.Sprintf("%012x%052d", r.next, 0)
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	r.containers[id] = &container{
		c:    runtime.Container{ID: id, Name: s.Name, Image: im.ID, State: "created", Created: time.Now(), Labels: labels},
		spec: s, done: make(chan struct{}), stop: make(chan struct{}),
	}
	return id, nil
}

// Start runs the container's command in the tiny shell.
func (r *Runtime) Start(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Start", id); err != nil {
		return err
	}
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if c.started {
		return fmt.Errorf("%s: container already started", id)
	}
	c.started, c.running, c.c.State = true, true, "running"
	go func() {
		code, out := shell(c.spec.Command, c.stop, nil)
		r.mu.Lock()
		defer r.mu.Unlock()
		c.out = out
		if c.running {
			r.exitLocked(c, code, false)
		}
	}()
	return nil
}

// Wait blocks until the container exits; past timeout it is killed and
// runtime.ErrTimeout returned, as the Podman runtime does.
func (r *Runtime) Wait(ctx context.Context, id string, timeout time.Duration) (int, error) {
	r.mu.Lock()
	err := r.enter("Wait", id)
	c, lerr := r.lookup(id)
	r.mu.Unlock()
	if err != nil {
		return -1, err
	}
	if lerr != nil {
		return -1, lerr
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return c.exit, nil
	case <-ctx.Done():
		r.Exit(id, 137, false)
		return -1, ctx.Err()
	case <-t.C:
		r.Exit(id, 137, false)
		return -1, runtime.ErrTimeout
	}
}

// State says whether the container runs, or its exit code.
func (r *Runtime) State(_ context.Context, id string) (bool, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("State", id); err != nil {
		return false, 0, err
	}
	c, err := r.lookup(id)
	if err != nil {
		return false, 0, err
	}
	return c.running || !c.started, c.exit, nil
}

// OOMKilled reports what Exit scripted.
func (r *Runtime) OOMKilled(_ context.Context, id string) (runtime.OOMVerdict, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("OOMKilled", id); err != nil {
		return runtime.OOMUnknown, err
	}
	c, err := r.lookup(id)
	if err != nil {
		return runtime.OOMUnknown, err
	}
	if c.oom {
		return runtime.OOMKill, nil
	}
	return runtime.NoOOMKill, nil
}

// Logs returns the command's output, each stream capped at max.
func (r *Runtime) Logs(_ context.Context, id string, max int64) (runtime.Output, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Logs", id); err != nil {
		return runtime.Output{}, err
	}
	c, err := r.lookup(id)
	if err != nil {
		return runtime.Output{}, err
	}
	return capOutput(c.out, max), nil
}

// Exec runs a command in a running container.
func (r *Runtime) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	r.mu.Lock()
	err := r.enter("Exec", id)
	c, lerr := r.lookup(id)
	running := lerr == nil && c.running
	hook := r.ExecHook
	r.mu.Unlock()
	if err != nil {
		return runtime.ExecResult{}, err
	}
	if lerr != nil {
		return runtime.ExecResult{}, lerr
	}
	if !running {
		return runtime.ExecResult{}, fmt.Errorf("%s: container is not running", id)
	}
	if hook != nil {
		return hook(id, req)
	}
	// The command ends with the call's context or with its container.
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ectx.Done():
		}
	}()
	// kill -s SIG -- -1 reaches the container's command (the only process
	// of its user but init), as Signal does.
	kill := func(sig string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.signalLocked(c, sig)
	}
	var code int
	var out runtime.Output
	timedOut := false
	if req.Timeout > 0 {
		// As the real runtime bounds an exec: the command ends past
		// Timeout, killed (137), whatever the image holds.
		code, out, timedOut = bounded(req.Timeout, ectx.Done(), func(stop <-chan struct{}) (int, runtime.Output) { return shell(req.Command, stop, kill) })
		if timedOut {
			code = 137
		}
	} else {
		code, out = shell(req.Command, ectx.Done(), kill)
	}
	if req.Stdout != nil {
		req.Stdout.Write(out.Stdout)
	}
	if req.Stderr != nil {
		req.Stderr.Write(out.Stderr)
	}
	return runtime.ExecResult{ExitCode: code, TimedOut: timedOut, Output: capOutput(out, req.Max)}, nil
}

// Signal delivers a signal to the container's init: KILL, TERM and INT
// end it (137, 143, 130), others are ignored as a shell ignores them.
func (r *Runtime) Signal(_ context.Context, id, sig string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Signal", id); err != nil {
		return err
	}
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if !c.running {
		return fmt.Errorf("%s: can only kill running containers", id)
	}
	r.signalLocked(c, sig)
	return nil
}

func (r *Runtime) signalLocked(c *container, sig string) {
	switch strings.TrimPrefix(strings.ToUpper(sig), "SIG") {
	case "KILL", "9":
		r.exitLocked(c, 137, false)
	case "TERM", "15":
		r.exitLocked(c, 143, false)
	case "INT", "2":
		r.exitLocked(c, 130, false)
	}
}

// Stop ends a running container (143, as a shell's exit on SIGTERM).
func (r *Runtime) Stop(_ context.Context, id string, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Stop", id); err != nil {
		return err
	}
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	r.exitLocked(c, 143, false)
	return nil
}

// Remove force-removes a container; an unknown one counts as removed, as
// the Podman runtime treats "no such container".
func (r *Runtime) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Remove", id); err != nil {
		return err
	}
	c, err := r.lookup(id)
	if err != nil {
		return nil
	}
	r.exitLocked(c, 137, false)
	delete(r.containers, c.c.ID)
	return nil
}

// List returns the containers carrying every one of labels.
func (r *Runtime) List(_ context.Context, labels map[string]string) ([]runtime.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("List", ""); err != nil {
		return nil, err
	}
	var out []runtime.Container
	for _, c := range r.containers {
		match := true
		for k, v := range labels {
			if c.c.Labels[k] != v {
				match = false
			}
		}
		if match {
			cc := c.c
			out = append(out, cc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Image looks an image up by name or ID.
func (r *Runtime) Image(_ context.Context, name string) (runtime.ImageInfo, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.enter("Image", ""); err != nil {
		return runtime.ImageInfo{}, false, err
	}
	im, ok := r.images[name]
	return im, ok, nil
}

func capOutput(o runtime.Output, max int64) runtime.Output {
	cut := func(b []byte) []byte {
		if max >= 0 && int64(len(b)) > max {
			return append([]byte(nil), b[:max]...)
		}
		return append([]byte(nil), b...)
	}
	return runtime.Output{Stdout: cut(o.Stdout), Stderr: cut(o.Stderr), StdoutTotal: int64(len(o.Stdout)), StderrTotal: int64(len(o.Stderr))}
}

// shell runs the tiny shell: `sh -c SCRIPT` (or the command's words as one
// statement) where SCRIPT is statements separated by ";" or newlines, each
// one of `echo WORDS`, `echo WORDS >&2`, `sleep SECONDS|infinity`,
// `exit N`, `true` and (in an exec, where kill is set) `kill -s SIG -- -1`;
// anything else fails with 127 and a message on stderr, as sh does for an
// unknown command. stop ends a sleep (exit 137). A command of coreutils'
// `timeout [-k S] [-s SIG] SECONDS COMMAND...` (what the sandbox wraps an
// exec with a timeout in) runs COMMAND and ends it with 124 past SECONDS.
func shell(cmd []string, stop <-chan struct{}, kill func(sig string)) (int, runtime.Output) {
	if len(cmd) > 0 && cmd[0] == "timeout" {
		return timeout(cmd[1:], stop, kill)
	}
	var out runtime.Output
	script := strings.Join(cmd, " ")
	if len(cmd) == 3 && (cmd[0] == "sh" || cmd[0] == "/bin/sh") && cmd[1] == "-c" {
		script = cmd[2]
	}
	for _, stmt := range strings.FieldsFunc(script, func(r rune) bool { return r == ';' || r == '\n' }) {
		f := strings.Fields(stmt)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "true":
		case "echo":
			words := f[1:]
			toErr := len(words) > 0 && words[len(words)-1] == ">&2"
			if toErr {
				words = words[:len(words)-1]
			}
			line := []byte(strings.Join(words, " ") + "\n")
			if toErr {
				out.Stderr = append(out.Stderr, line...)
			} else {
				out.Stdout = append(out.Stdout, line...)
			}
		case "sleep":
			var d time.Duration
			if len(f) > 1 && f[1] == "infinity" {
				d = time.Duration(1<<63 - 1)
			} else if len(f) > 1 {
				s, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					out.Stderr = append(out.Stderr, []byte("sleep: invalid time interval\n")...)
					return 1, out
				}
				d = time.Duration(s * float64(time.Second))
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return 137, out
			}
		case "exit":
			code := 0
			if len(f) > 1 {
				code, _ = strconv.Atoi(f[1])
			}
			return code, out
		case "kill":
			if kill == nil {
				out.Stderr = append(out.Stderr, []byte("sh: kill: not found\n")...)
				return 127, out
			}
			if len(f) != 5 || f[1] != "-s" || f[3] != "--" || f[4] != "-1" {
				out.Stderr = append(out.Stderr, []byte("kill: the tiny shell knows only kill -s SIG -- -1\n")...)
				return 2, out
			}
			kill(f[2])
		default:
			out.Stderr = append(out.Stderr, []byte("sh: "+f[0]+": not found\n")...)
			return 127, out
		}
	}
	return 0, out
}

// timeout is coreutils' timeout(1) over the tiny shell: past the duration
// the command ends and the exit code is 124.
func timeout(args []string, stop <-chan struct{}, kill func(string)) (int, runtime.Output) {
	for len(args) > 1 && (args[0] == "-k" || args[0] == "-s") {
		args = args[2:]
	}
	bad := func() (int, runtime.Output) {
		return 125, runtime.Output{Stderr: []byte("timeout: invalid arguments\n")}
	}
	if len(args) < 2 {
		return bad()
	}
	secs, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		return bad()
	}
	code, out, fired := bounded(time.Duration(secs*float64(time.Second)), stop, func(inner <-chan struct{}) (int, runtime.Output) { return shell(args[1:], inner, kill) })
	if fired {
		return 124, out
	}
	return code, out
}

// bounded runs run until stop closes or d passes (fired).
func bounded(d time.Duration, stop <-chan struct{}, run func(stop <-chan struct{}) (int, runtime.Output)) (int, runtime.Output, bool) {
	end := make(chan struct{})
	var fired atomic.Bool
	t := time.AfterFunc(d, func() { fired.Store(true); close(end) })
	defer t.Stop()
	inner := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-end:
		}
		close(inner)
	}()
	code, out := run(inner)
	if t.Stop() {
		close(end) // ends the goroutine above
	}
	return code, out, fired.Load()
}

var _ runtime.Runtime = (*Runtime)(nil)
