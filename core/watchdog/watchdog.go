// Package watchdog removes the containers of a server that died. A server
// killed with SIGKILL (an MCP host giving up on a slow server) cannot clean
// up after itself, and its sandboxes would go on running user code
// unattended until the next server on the same base path starts.
//
// `mcp-forge serve` starts the watchdog as a child in a process group of its
// own (a signal to the server's group does not reach it), holding the read
// end of a pipe whose write end only the server holds. However the server
// ends, the kernel closes that end: EOF. A server that stops cleanly writes
// one byte first, after removing its containers itself. Either way the
// watchdog removes every container labelled with the server's id, audits
// each removal, and exits: it never outlives the server by more than that
// sweep.
package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// cleanStop is what a server writes before a clean exit.
const cleanStop = 'c'

// Handle is the server's side of its watchdog.
type Handle struct {
	cmd  *exec.Cmd
	w    *os.File
	done chan struct{}
}

// Start runs `exe args...` as this process's watchdog: the child reads the
// pipe on file descriptor 3 (see Pipe), in its own process group, with no
// stdin or stdout (stdout carries the server's MCP traffic; a watchdog
// holding it would keep the host from seeing the server's end).
func Start(exe string, args []string, stderr io.Writer) (*Handle, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog pipe: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	r.Close() // only the child reads; w is ours alone (close-on-exec)
	h := &Handle{cmd: cmd, w: w, done: make(chan struct{})}
	go func() { cmd.Wait(); close(h.done) }()
	return h, nil
}

// Pid is the watchdog's process id.
func (h *Handle) Pid() int { return h.cmd.Process.Pid }

// Stop tells the watchdog that the server stopped cleanly and waits (at most
// grace) for it to finish its last sweep and exit.
func (h *Handle) Stop(grace time.Duration) error {
	_, _ = h.w.Write([]byte{cleanStop})
	h.w.Close()
	select {
	case <-h.done:
		return nil
	case <-time.After(grace):
		_ = h.cmd.Process.Kill()
		return fmt.Errorf("the watchdog did not exit within %s and was killed", grace)
	}
}

// Pipe is the watchdog's end of the pipe, as Start hands it over.
func Pipe() *os.File { return os.NewFile(3, "server-pipe") }

// Options are what the watchdog needs to clean up after its server.
type Options struct {
	ServerID string
	Runtime  runtime.Containers // it lists and removes, nothing else
	// Audit opens the audit log; it is opened only once there is something
	// to record, so that a live server is never written alongside.
	Audit func() (audit.Recorder, func(), error)
	Log   hclog.Logger
	// Settle is how long after a death containers are looked for: one
	// whose creation was under way may appear after the first sweep.
	Settle time.Duration
	// GiveUp bounds how long a sweep is retried while Podman does not
	// answer.
	GiveUp time.Duration
	// Release, when set, runs once the server's containers are all gone:
	// it frees what they held on the host (workspace filesystems) and
	// returns how many it freed.
	Release func() (int, error)
}

// Run waits for the server's end (EOF on r) and removes its containers. It
// returns how many it removed.
func Run(r io.Reader, o Options) (int, error) {
	// Nothing but the pipe ends the watch: the server's signals are not
	// ours (systemd sends SIGTERM to the whole unit; the sweep must run).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	clean := false
	buf := make([]byte, 1)
	for {
		n, err := r.Read(buf)
		if n > 0 && buf[0] == cleanStop {
			clean = true
		}
		if err != nil {
			break
		}
	}
	died := time.Now()
	if clean {
		o.Log.Debug("server stopped cleanly; final sweep", "server", o.ServerID)
	} else {
		o.Log.Warn("server ended without stopping: removing its containers", "server", o.ServerID)
	}
	n, err := sweep(o, died, clean)
	// A clean server released its workspaces itself; a killed one's are
	// freed only once none of its containers holds them.
	if !clean && err == nil && o.Release != nil {
		k, rerr := o.Release()
		if k > 0 {
			o.Log.Warn("released the workspaces of a server that ended without stopping", "server", o.ServerID, "count", k)
		}
		if rerr != nil {
			o.Log.Error("could not release the workspaces of a dead server; the next server on this base path will", "server", o.ServerID, "error", rerr)
			err = rerr
		}
	}
	return n, err
}

func sweep(o Options, died time.Time, clean bool) (int, error) {
	if o.Settle == 0 {
		o.Settle = 2 * time.Second
	}
	if o.GiveUp == 0 {
		o.GiveUp = 2 * time.Minute
	}
	var rec audit.Recorder
	closeAudit := func() {}
	defer func() { closeAudit() }()
	record := func(e audit.Entry) {
		if rec == nil {
			r, c, err := o.Audit()
			if err != nil {
				o.Log.Error("cannot open the audit log; removing containers unaudited", "error", err)
				r, c = audit.Discard{}, func() {}
			}
			rec, closeAudit = r, c
		}
		rec.Record(e)
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 200*time.Millisecond, 5*time.Second, 0
	removed := 0
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		list, err := o.Runtime.List(ctx, map[string]string{runtime.LabelServer: o.ServerID})
		cancel()
		lastErr = err
		for _, c := range list {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			rerr := o.Runtime.Remove(ctx, c.ID)
			cancel()
			record(audit.Entry{Event: audit.ContainerReap, SessionID: c.Labels[runtime.LabelSession], Success: rerr == nil,
				Severity: severity(rerr), Error: audit.ErrText(rerr),
				Details: map[string]any{"container_id": c.ID, "image": c.Image, "left_by": o.ServerID, "by": "watchdog", "clean_stop": clean}})
			if rerr != nil {
				lastErr = rerr
				o.Log.Warn("could not remove container", "id", c.ID, "error", rerr)
				continue
			}
			removed++
		}
		settled := clean || time.Since(died) >= o.Settle
		if err == nil && len(list) == 0 && settled {
			break
		}
		if time.Since(died) > o.GiveUp {
			o.Log.Error("giving up; the next server on this base path removes what is left", "error", lastErr)
			break
		}
		wait := b.NextBackOff()
		if err == nil && len(list) == 0 {
			wait = min(wait, o.Settle-time.Since(died)) // only waiting to settle
		}
		time.Sleep(wait)
	}
	if removed > 0 {
		record(audit.Entry{Event: audit.WatchdogEvent, Success: lastErr == nil, Severity: severity(lastErr), Error: audit.ErrText(lastErr),
			Details: map[string]any{"server": o.ServerID, "removed": removed, "clean_stop": clean,
				"seconds_after_death": time.Since(died).Seconds()}})
	}
	if lastErr != nil {
		return removed, lastErr
	}
	return removed, nil
}

func severity(err error) string {
	if err != nil {
		return audit.Error
	}
	return audit.Warning // a server left running containers behind
}

// ErrNoPipe is returned when the watchdog was started without its pipe.
var ErrNoPipe = errors.New("the watchdog is started by `mcp-forge serve`, not by hand: file descriptor 3 is not its server's pipe")

// CheckPipe verifies that f is the read end of a pipe.
func CheckPipe(f *os.File) error {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		return ErrNoPipe
	}
	return nil
}
