package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecMark starts the first line Exec writes on stderr: its process group.
const ExecMark = "\x00forge-exec "

// MaxExecEnv bounds the environment Exec reads from stdin.
const MaxExecEnv = 1 << 20

// Exec starts an exec's command: the API has no environment or working
// directory for an exec, and the core needs its process group to bound
// it. The environment comes first on stdin (a length line, then K=V pairs
// NUL separated), never in the command: exec arguments are in the
// request's URL, which the API server's audit log and proxies record. The
// rest of stdin is the command's. It reports its process group on
// stderr's first line (ExecMark), then becomes the command. It returns
// only if that failed (126: no such working directory, 127: no command).
func Exec(dir string, argv []string) int {
	env, err := readEnv(0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec: %v\n", err)
		return 127
	}
	env, _ = cleanEnv(append(os.Environ(), env...))
	os.Clearenv()
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	_ = unix.Setpgid(0, 0)
	fmt.Fprintf(os.Stderr, "%s%d\n", ExecMark, os.Getpid())
	if dir != "" {
		if err := os.Chdir(dir); err != nil {
			fmt.Fprintf(os.Stderr, "cd %s: %s\n", dir, strerror(err))
			return 126
		}
	}
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "exec: no command")
		return 127
	}
	return become(argv)
}

// become replaces this process with argv (found on PATH) and returns only
// if it could not: 127, and why on stderr.
func become(argv []string) int {
	p, err := exec.LookPath(argv[0])
	if err == nil {
		err = syscall.Exec(p, argv, os.Environ())
	}
	fmt.Fprintf(os.Stderr, "exec %s: %s\n", argv[0], strerror(err))
	return 127
}

// strerror is err as the C library says its errno ("No such file or
// directory"), which is what a shell or Perl reports; a command not found
// on the PATH is ENOENT.
func strerror(err error) string {
	var no syscall.Errno
	switch {
	case errors.Is(err, exec.ErrNotFound):
		no = syscall.ENOENT
	case errors.As(err, &no):
	default:
		return err.Error()
	}
	s := no.Error()
	return strings.ToUpper(s[:1]) + s[1:]
}

// readEnv reads the environment's header from fd, a byte at a time: what
// follows is the command's stdin, which must stay unread.
func readEnv(fd int) ([]string, error) {
	var head []byte
	var b [1]byte
	for len(head) < 16 {
		n, err := unix.Read(fd, b[:])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
		if b[0] == '\n' {
			break
		}
		head = append(head, b[0])
	}
	n, err := strconv.Atoi(string(head))
	if err != nil || n < 0 || n > MaxExecEnv {
		return nil, fmt.Errorf("an environment header %q", head)
	}
	buf := make([]byte, n)
	for off := 0; off < n; {
		got, err := unix.Read(fd, buf[off:])
		if err == unix.EINTR {
			continue
		}
		if got <= 0 || err != nil {
			return nil, fmt.Errorf("the environment ended after %d of %d bytes", off, n)
		}
		off += got
	}
	var env []string
	for _, kv := range bytes.Split(buf, []byte{0}) {
		if bytes.IndexByte(kv, '=') > 0 {
			env = append(env, string(kv))
		}
	}
	return env, nil
}

// EncodeEnv is the stdin prefix Exec reads: env's K=V pairs.
func EncodeEnv(keys []string, env map[string]string) []byte {
	var b []byte
	for _, k := range keys {
		b = append(append(append(b, k...), '='), env[k]...)
		b = append(b, 0)
	}
	return append([]byte(strconv.Itoa(len(b))+"\n"), b...)
}

// Kill sends signal sig (a name: TERM, KILL, ...) to target as kill(2)
// takes it: a pid, -pgid, or -1 for every process it may signal.
func Kill(sig, target string) int {
	s := unix.SignalNum("SIG" + strings.TrimPrefix(sig, "SIG"))
	t, err := strconv.Atoi(target)
	if s == 0 || err != nil {
		fmt.Fprintf(os.Stderr, "kill: signal %q, target %q\n", sig, target)
		return 2
	}
	if err := unix.Kill(t, s); err != nil {
		fmt.Fprintf(os.Stderr, "kill: %v\n", err)
		return 1
	}
	return 0
}
