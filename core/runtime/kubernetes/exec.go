package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podexec"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// run runs a short command of the core's in a container of pod id and
// returns its output.
func (c *Client) run(ctx context.Context, id, container string, cmd []string, stdin []byte) (runtime.ExecResult, error) {
	cx, cancel := op(ctx)
	defer cancel()
	var out, errb bytes.Buffer
	s := podexec.Stream{Container: container, Command: cmd, Stdout: &out, Stderr: &errb}
	if stdin != nil {
		s.Stdin = bytes.NewReader(stdin)
	}
	code, err := c.exec(cx, id, s)
	if err != nil {
		return runtime.ExecResult{}, fail("exec in "+container, id, err)
	}
	return runtime.ExecResult{ExitCode: code, Output: runtime.Output{Stdout: out.Bytes(), Stderr: errb.Bytes(),
		StdoutTotal: int64(out.Len()), StderrTotal: int64(errb.Len())}}, nil
}

// execMark starts the agent exec's first line on stderr: the process
// group it made, which bound kills past the exec's timeout.
const execMark = agent.ExecMark

// killCmd signals a process group (target > 0) or every process but
// init (-1), as kill(2) in the sandbox container.
func killCmd(sig string, target int) []string {
	if target > 0 {
		return podspec.AgentCmd("kill", sig, strconv.Itoa(-target))
	}
	return podspec.AgentCmd("kill", sig, strconv.Itoa(target))
}

// Exec implements runtime.Containers: the command under the agent's exec,
// which takes its environment from stdin (never in the command: exec
// arguments are in the API server's URL, which its audit log records),
// makes its process group and reports it on stderr's first line.
func (c *Client) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	cmd := append(podspec.AgentCmd("exec", req.WorkDir, "--"), req.Command...)
	stdin := io.MultiReader(bytes.NewReader(agent.EncodeEnv(slices.Sorted(maps.Keys(req.Env)), req.Env)), bytes.NewReader(req.Stdin))
	out, errw, ow, ew := runtime.ExecStreams(req)
	mark := &marked{w: ew, pid: make(chan int, 1)}
	s := podexec.Stream{Container: podspec.Sandbox, Command: cmd, Stdin: stdin, Stdout: ow, Stderr: mark}
	done := make(chan struct{})
	var timedOut bool
	var bound sync.WaitGroup
	// The stream is cut once the command's group was killed and a grace
	// passed: a process that left the group (setsid) and holds the
	// stream's stdout does not hold the exec beyond its bound.
	ectx, cut := context.WithCancel(ctx)
	defer cut()
	if req.Timeout > 0 {
		bound.Add(1)
		go func() {
			defer bound.Done()
			if timedOut = c.bound(ctx, id, req.Timeout, mark.pid, done); timedOut {
				select {
				case <-done:
				case <-time.After(runtime.ExecKillGrace):
					cut()
				}
			}
		}()
	}
	code, err := c.exec(ectx, id, s)
	close(done)
	bound.Wait()
	if err != nil && timedOut && ctx.Err() == nil {
		code, err = 137, nil // cut at its bound: a timeout, reported as one
	}
	if err != nil {
		return runtime.ExecResult{}, fail("exec", id, err)
	}
	return runtime.ExecResult{ExitCode: code, TimedOut: timedOut, Output: runtime.OutputOf(out, errw)}, nil
}

// bound ends an exec past timeout: SIGTERM to its process group, SIGKILL
// runtime.ExecKillGrace later, sent by another exec in the same container.
func (c *Client) bound(ctx context.Context, id string, timeout time.Duration, pids <-chan int, done <-chan struct{}) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var pid int
	select {
	case <-done:
		return false
	case <-ctx.Done():
		return false
	case pid = <-pids:
	}
	select {
	case <-done:
		return false
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	sent := false
	for _, sig := range []string{"TERM", "KILL"} {
		select {
		case <-done:
			return sent
		default:
		}
		if res, err := c.run(context.WithoutCancel(ctx), id, podspec.Sandbox, killCmd(sig, pid), nil); err != nil || res.ExitCode != 0 {
			c.log.Warn("could not end a command past its timeout", "pod", id, "signal", sig, "error", err, "stderr", string(res.Stderr))
		}
		sent = true
		select {
		case <-done:
			return true
		case <-time.After(runtime.ExecKillGrace):
		}
	}
	return sent
}

// marked takes the agent exec's first line out of stderr and passes on the
// process group it names.
type marked struct {
	w    io.Writer
	head []byte
	past bool
	pid  chan int
}

func (m *marked) Write(p []byte) (int, error) {
	if m.past {
		return m.w.Write(p)
	}
	n := len(p)
	m.head = append(m.head, p...)
	i := bytes.IndexByte(m.head, '\n')
	if i < 0 && len(m.head) < 64 {
		return n, nil
	}
	m.past = true
	rest := m.head
	if i >= 0 && bytes.HasPrefix(m.head, []byte(execMark)) {
		if pid, err := strconv.Atoi(string(m.head[len(execMark):i])); err == nil && pid > 1 {
			m.pid <- pid
		}
		rest = m.head[i+1:]
	}
	m.head = nil
	if len(rest) > 0 {
		if _, err := m.w.Write(rest); err != nil {
			return n, err
		}
	}
	return n, nil
}

// errExit is a helper command of the core that failed in the pod.
func errExit(what string, r runtime.ExecResult) error {
	return fmt.Errorf("%s: exit %d: %s", what, r.ExitCode, bytes.TrimSpace(r.Stderr))
}
