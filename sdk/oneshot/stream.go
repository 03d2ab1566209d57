package oneshot

import (
	"bytes"
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// ExecuteStream implements backend.StreamingBackend. A resident run's
// output is in its stdout and stderr files (see the package documentation),
// so a run still going after followDelay has them followed by one command
// in its container (followCommand) and what they gain sent to emit,
// coalesced every flushEvery and at most the run's output cap in all. A
// run that ends sooner costs nothing more than Execute. A cold run (a
// runner without the resident contract) writes to the container's log,
// read when it ends: it streams nothing.
func (b *Backend) ExecuteStream(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	if !b.spec.Resident {
		return b.executeCold(ctx, req)
	}
	return b.executeResident(ctx, req, emit)
}

var _ backend.StreamingBackend = (*Backend)(nil)

// followDelay is how long a run goes before its output is followed: most
// runs are over by then, and the follower is an exec in the container (about
// 0.1–0.2 s of the engine's time on Podman). A variable for the tests.
var followDelay = 500 * time.Millisecond

// flushEvery is how often followed output is sent: a program printing a
// million lines sends a few events a second, not a million.
const flushEvery = 100 * time.Millisecond

// followCommand writes the run's stdout file to its stdout and its stderr
// file to its stderr, each from its first byte and as it grows. GNU tail
// (coreutils, in every Debian image; busybox's has the same options) sees
// the runner empty the files when the code arrives and starts again; its
// own messages ("file truncated") go nowhere, so only the program's output
// comes back. An image without tail streams nothing: the command fails and
// the run goes on.
var followCommand = []string{"/bin/sh", "-c",
	`tail -c +1 -f -s 0.2 "$1" 2>/dev/null & exec tail -c +1 -f -s 0.2 "$2" 1>&2 2>/dev/null`,
	"sh", metaDir + "/stdout", metaDir + "/stderr"}

// followEndWait bounds the wait, once a run's container has exited, for its
// follower's exec to end with it (at once on Podman and Kubernetes) before
// the exec is cancelled, which the core audits as a failed exec.
const followEndWait = 5 * time.Second

// follower follows one run's output. stop ends the events (none is sent
// once it returns); end ends the command, once the container is gone (it
// ends with the container on Podman and Kubernetes; end is for a host
// where it would not, and for a run whose output reached the cap).
type follower struct {
	c      *coalescer
	cancel context.CancelFunc
	done   chan struct{}
}

// follow starts following container id's output after followDelay, for at
// most timeout (0: the container's own bound), sending at most limit bytes
// to emit. A nil emit follows nothing.
func (b *Backend) follow(ctx context.Context, id string, timeout time.Duration, limit int64, emit func(backend.StreamEvent)) *follower {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &follower{cancel: cancel, done: make(chan struct{})}
	if emit == nil || limit <= 0 {
		close(f.done)
		return f
	}
	f.c = newCoalescer(limit, emit)
	go func() {
		defer close(f.done)
		select {
		case <-ctx.Done():
			return
		case <-fctx.Done():
			return
		case <-f.c.stopped:
			return
		case <-time.After(followDelay):
		}
		ticks := time.NewTicker(flushEvery)
		defer ticks.Stop()
		execDone := make(chan struct{})
		go func() {
			defer close(execDone)
			if timeout > 0 {
				timeout += 30 * time.Second // the container's own bound comes first
			}
			_, _ = b.sb.Exec(fctx, id, host.ExecRequest{Command: followCommand, MaxBytes: 1, Timeout: timeout,
				Output: func(s host.Stream, p []byte) {
					if f.c.add(s, p) {
						cancel() // the cap is reached: nothing more is sent
					}
				}})
		}()
		for {
			select {
			case <-ticks.C:
				f.c.flush()
			case <-f.c.stopped:
				<-execDone
				return
			case <-execDone:
				f.c.flush()
				return
			}
		}
	}()
	return f
}

// stop ends the events: after it returns emit is not called again. What
// was not sent yet is in the result anyway.
func (f *follower) stop() {
	if f.c != nil {
		f.c.close()
	}
}

// end ends the command and waits for the follower, at most wait.
func (f *follower) end(wait time.Duration) {
	f.stop()
	select {
	case <-f.done:
	case <-time.After(wait):
	}
	f.cancel()
	<-f.done
}

// coalescer turns the chunks a follower reads into few events: each flush
// sends, per stream, its complete lines (a line still being written waits
// one flush, then goes as it is), never a character cut in two, and no
// more than limit bytes in all.
type coalescer struct {
	emit    func(backend.StreamEvent)
	stopped chan struct{} // closed by close

	mu      sync.Mutex
	left    int64 // bytes that may still be taken
	pending [2][]byte
	held    [2]bool // the pending text was held back by the last flush
	closed  bool
}

var streams = [2]host.Stream{host.Stdout, host.Stderr}

func newCoalescer(limit int64, emit func(backend.StreamEvent)) *coalescer {
	return &coalescer{emit: emit, left: limit, stopped: make(chan struct{})}
}

// add takes p of stream s, and reports whether the limit is reached (no
// more will be taken). After close it drops p: the follower's command then
// ends with the container, not cancelled (which the core audits as failed).
func (c *coalescer) add(s host.Stream, p []byte) (full bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.left <= 0 {
		return true
	}
	i := 0
	if s == host.Stderr {
		i = 1
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	c.left -= int64(len(p))
	c.pending[i] = append(c.pending[i], p...)
	return c.left <= 0
}

// flush sends what is ready (see coalescer).
func (c *coalescer) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for i, data := range c.pending {
		n := len(data)
		if !c.held[i] {
			n = bytes.LastIndexByte(data, '\n') + 1 // the partial line waits once
		}
		n = runeStart(data, n)
		if n > 0 {
			c.emit(backend.StreamEvent{Name: streams[i], Text: string(data[:n])})
		}
		c.pending[i] = append(data[:0:0], data[n:]...)
		c.held[i] = len(c.pending[i]) > 0
	}
}

// close ends the events: flush and emit are never called after it.
func (c *coalescer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.stopped)
	}
}

// runeStart moves n back to the start of a UTF-8 character cut by it, so
// that the bytes before n end with a whole one.
func runeStart(data []byte, n int) int {
	for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:n]) {
				return i
			}
			return n
		}
	}
	return n
}
