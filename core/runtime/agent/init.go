package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Init is the sandbox container's PID 1: images carry no init and a pod
// gets none injected (Podman's --init). It forwards signals to the
// command, reaps orphans, captures stdout and stderr apart into out/stdout
// and out/stderr (the log API merges them) keeping FORGE_LOG_MAX bytes of
// each and writing the totals to out/totals, and exits as the command did
// (128+n for signal n).
//
// It also drops the API server's address, which the kubelet puts in every
// container's environment whatever enableServiceLinks says: removing it
// from its own environment changes only what children get, while
// /proc/1/environ, which the sandbox reads, shows what PID 1 was started
// with; so PID 1 executes itself again without it.
func Init(out string, argv []string) int {
	if env, dropped := cleanEnv(os.Environ()); dropped {
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintf(os.Stderr, "re-exec without the API server's address: %v\n", err)
		return 127
	}
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "init: no command")
		return 2
	}
	keep := int64(1 << 20)
	if v, err := strconv.ParseInt(os.Getenv("FORGE_LOG_MAX"), 10, 64); err == nil && v > 0 {
		keep = v
	}
	os.Unsetenv("FORGE_LOG_MAX")
	fo, err1 := os.Create(filepath.Join(out, "stdout"))
	fe, err2 := os.Create(filepath.Join(out, "stderr"))
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "init: %v %v\n", err1, err2)
		return 127
	}
	or, ow, err1 := os.Pipe()
	er, ew, err2 := os.Pipe()
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "init: pipe: %v %v\n", err1, err2)
		return 127
	}
	// Signals are taken before the command starts: none is lost to the
	// default action between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH, unix.SIGALRM, unix.SIGCHLD)
	var pid int
	if p, err := exec.LookPath(argv[0]); err == nil {
		pid, err = syscall.ForkExec(p, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, ow.Fd(), ew.Fd()}})
		if err != nil {
			fmt.Fprintf(fe, "exec %s: %s\n", argv[0], strerror(err))
		}
	} else {
		fmt.Fprintf(fe, "exec %s: %s\n", argv[0], strerror(err))
	}
	ow.Close()
	ew.Close()
	if pid == 0 {
		writeTotals(out, 0, 0)
		return 127
	}
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	totals := make([]int64, 2)
	for i, p := range []struct {
		r *os.File
		w *os.File
	}{{or, fo}, {er, fe}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			totals[i] = capture(p.r, p.w, keep, &last)
		}()
	}
	copied := make(chan struct{})
	go func() { wg.Wait(); close(copied) }()
	status := reapUntil(pid, sigs)
	// The command is gone; what it left holding its output (a child in
	// the background) has 2 s, and 0.2 s of silence ends the wait.
	gone := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
wait:
	for {
		select {
		case <-copied:
			break wait
		case <-tick.C:
			if time.Since(gone) > 2*time.Second || time.Since(time.Unix(0, last.Load())) > 200*time.Millisecond {
				break wait
			}
		}
	}
	tick.Stop()
	or.Close()
	er.Close()
	select {
	case <-copied:
	case <-time.After(time.Second):
	}
	writeTotals(out, totals[0], totals[1])
	fo.Close()
	fe.Close()
	return exitCode(status)
}

// cleanEnv is env without the API server's address; dropped says whether
// there was one.
func cleanEnv(env []string) ([]string, bool) {
	out := env[:0:0]
	dropped := false
	for _, kv := range env {
		if strings.HasPrefix(kv, "KUBERNETES_SERVICE") || strings.HasPrefix(kv, "KUBERNETES_PORT") {
			dropped = true
			continue
		}
		out = append(out, kv)
	}
	return out, dropped
}

// capture copies r to w up to keep bytes, counting them all.
func capture(r io.Reader, w io.Writer, keep int64, last *atomic.Int64) int64 {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		got, err := r.Read(buf)
		if got > 0 {
			last.Store(time.Now().UnixNano())
			if room := keep - n; room > 0 {
				_, _ = w.Write(buf[:min(int64(got), room)])
			}
			n += int64(got)
		}
		if err != nil {
			return n
		}
	}
}

func writeTotals(out string, o, e int64) {
	_ = os.WriteFile(filepath.Join(out, "totals"), []byte(fmt.Sprintf("%d %d\n", o, e)), 0o644)
}

// reapUntil forwards signals to pid and reaps every child until pid has
// exited, whose status it answers.
func reapUntil(pid int, sigs <-chan os.Signal) unix.WaitStatus {
	for {
		for {
			var ws unix.WaitStatus
			w, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if w == pid {
				return ws
			}
			if err == unix.ECHILD {
				return ws // cannot happen while pid runs
			}
			if w <= 0 || err != nil {
				break
			}
		}
		s := <-sigs
		if s != unix.SIGCHLD {
			_ = unix.Kill(pid, s.(syscall.Signal))
		}
	}
}

// Reap reaps children until the process ends (the keeper's PID 1).
func reapAll(sigs <-chan os.Signal) {
	for s := range sigs {
		if s != unix.SIGCHLD {
			return
		}
		for {
			var ws unix.WaitStatus
			if w, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); w <= 0 || err != nil {
				break
			}
		}
	}
}

// exitCode is a status as a shell reports it: 128+n for signal n.
func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
