// Package toolrun runs the package tools of the builder plugins (uv, pip,
// apt, dpkg-deb): in a process group of their own, so a cancel kills the
// helpers they start too; killed with the plugin, so a plugin the core ends
// leaves nothing writing into its work directory; with a bound on time and
// on the output kept, and each output line seen as it comes (progress).
package toolrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cmd is one run of a tool.
type Cmd struct {
	Bin     string
	Args    []string
	Env     []string // the whole environment: nothing of the plugin's is passed
	Dir     string
	Timeout time.Duration
	// Keep bounds the bytes of each stream returned; lines past it are still
	// given to OnLine.
	Keep int
	// OnLine sees each line of stdout and stderr, one call at a time; none
	// comes after Run returns.
	OnLine func(line string)
	// MaxWrite, when > 0, bounds the bytes the tool writes, as the kernel
	// counts its write calls (/proc/<pid>/io wchar: files, copies and its
	// output alike), watched every few milliseconds: past it the tool's
	// process group is killed and Run's error wraps ErrWriteLimit. Each file
	// is bounded exactly too (RLIMIT_FSIZE), so one huge file stops at the
	// limit. It is how an archive that unpacks to far more than it weighs
	// (a decompression bomb) is stopped while it unpacks, not after.
	MaxWrite int64
}

// ErrWriteLimit is wrapped by Run's error when the tool wrote more than
// Cmd.MaxWrite.
var ErrWriteLimit = errors.New("the tool wrote more than its limit")

// WriteLimitError says how much a stopped tool had written.
type WriteLimitError struct {
	Tool    string
	Written int64 // bytes written when it was stopped (at least)
	Limit   int64
}

func (e *WriteLimitError) Error() string {
	return fmt.Sprintf("%s was stopped after writing %d bytes (its limit: %d)", e.Tool, e.Written, e.Limit)
}

func (e *WriteLimitError) Unwrap() error { return ErrWriteLimit }

// pollEvery is how often a tool's written bytes are read.
const pollEvery = 5 * time.Millisecond

// written is the bytes process pid has written (wchar of /proc/<pid>/io).
func written(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no wchar", pid)
}

// Run runs c and returns what it printed. Past c.Timeout the error says so
// (and wraps context.DeadlineExceeded).
func Run(ctx context.Context, c Cmd) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bin, c.Args...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		so, se strings.Builder
	)
	pipe := func(w *strings.Builder) *io.PipeWriter {
		pr, pw := io.Pipe()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				mu.Lock()
				if w.Len() < c.Keep {
					w.WriteString(line + "\n")
				}
				if c.OnLine != nil {
					c.OnLine(line)
				}
				mu.Unlock()
			}
			io.Copy(io.Discard, pr)
		}()
		return pw
	}
	outW, errW := pipe(&so), pipe(&se)
	cmd.Stdout, cmd.Stderr = outW, errW
	var over atomic.Pointer[WriteLimitError]
	if err = cmd.Start(); err == nil {
		done := make(chan struct{})
		var watched sync.WaitGroup
		if c.MaxWrite > 0 {
			pid := cmd.Process.Pid
			// Before the tool has unpacked anything (it has barely started):
			// no single file grows past the limit.
			_ = unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(c.MaxWrite), Max: uint64(c.MaxWrite)}, nil)
			watched.Add(1)
			go func() {
				defer watched.Done()
				over.Store(watch(pid, c.MaxWrite, filepath.Base(c.Bin), done))
			}()
		}
		err = cmd.Wait()
		close(done)
		watched.Wait()
	}
	// Wait has copied everything the tool wrote (or given up WaitDelay after
	// a kill): closing the writers ends the scanners.
	outW.Close()
	errW.Close()
	wg.Wait()
	var ee *exec.ExitError
	if wl := over.Load(); wl != nil {
		err = wl
	} else if c.MaxWrite > 0 && errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGXFSZ {
			err = &WriteLimitError{Tool: filepath.Base(c.Bin), Written: c.MaxWrite, Limit: c.MaxWrite}
		}
	}
	if err != nil && !errors.Is(err, ErrWriteLimit) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s did not finish within %s: %w", filepath.Base(c.Bin), c.Timeout, ctx.Err())
	}
	return so.String(), se.String(), err
}

// watch polls what pid has written until done, killing its process group
// past limit. A tool that cannot be watched is killed too: the limit fails
// closed.
func watch(pid int, limit int64, tool string, done <-chan struct{}) *WriteLimitError {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		n, err := written(pid)
		switch {
		case err != nil:
			// The tool may just have been reaped; if not, it runs unwatched.
			select {
			case <-done:
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			select {
			case <-done:
				return nil
			default:
			}
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return &WriteLimitError{Tool: tool + " (its writes could not be watched: " + err.Error() + ")", Written: -1, Limit: limit}
		case n > limit:
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return &WriteLimitError{Tool: tool, Written: n, Limit: limit}
		}
		select {
		case <-done:
			return nil
		case <-t.C:
		}
	}
}
