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
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
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
	err = cmd.Run()
	// Run has copied everything the tool wrote (or given up WaitDelay after
	// a kill): closing the writers ends the scanners.
	outW.Close()
	errW.Close()
	wg.Wait()
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s did not finish within %s: %w", filepath.Base(c.Bin), c.Timeout, ctx.Err())
	}
	return so.String(), se.String(), err
}
