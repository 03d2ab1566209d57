package agent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoUnix serves sock after delay: each connection gets "pong:" and
// what it sent, once the client has closed its write side.
func echoUnix(t *testing.T, sock string, delay time.Duration) {
	t.Helper()
	go func() {
		time.Sleep(delay)
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write(append([]byte("pong:"), b...))
			}()
		}
	}()
}

// ask sends msg to addr, closes its write side, and reads the answer.
func ask(t *testing.T, addr, msg string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestServeForward(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeForward(l, sock, 2*time.Second) }()

	// Nothing listens on sock yet: the connection waits for it.
	echoUnix(t, sock, 300*time.Millisecond)
	if got, err := ask(t, l.Addr().String(), "ping"); err != nil || got != "pong:ping" {
		t.Fatalf("first connection, before the socket: %q %v", got, err)
	}
	// Big payloads both ways, several at once.
	big := strings.Repeat("0123456789", 100_000)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			got, err := ask(t, l.Addr().String(), big)
			if err == nil && got != "pong:"+big {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("a megabyte each way, four at once: %v", err)
		}
	}
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("ServeForward after its listener closed: %v", err)
	}
}

func TestServeForwardGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go ServeForward(l, filepath.Join(t.TempDir(), "never.sock"), 200*time.Millisecond) //nolint:errcheck
	start := time.Now()
	got, _ := ask(t, l.Addr().String(), "ping")
	if got != "" || time.Since(start) > 5*time.Second {
		t.Fatalf("no socket: got %q after %v; want the connection closed after the patience", got, time.Since(start))
	}
}

// freePort is a TCP port on 127.0.0.1 nothing listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// killForwarders ends the forwarder children serving sock (they leave
// their parent, as in a sandbox).
func killForwarders(sock string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), "forward-serve\x00"+sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestForward(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "egress.sock")
	t.Cleanup(func() { killForwarders(sock) })
	echoUnix(t, sock, 0)
	port := freePort(t)
	// The command runs once the forwarder listens, as the process Forward was.
	code, out, errs := run(t, nil, nil, "forward", sock, port, "--", "sh", "-c", "echo started $$")
	if code != 0 || !strings.HasPrefix(out, "started ") {
		t.Fatalf("forward then the command: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if got, err := ask(t, "127.0.0.1:"+port, "ping"); err != nil || got != "pong:ping" {
		t.Fatalf("through the forwarder the command left: %q %v", got, err)
	}

	// The port taken: 125, said, and the command does not run.
	code, out, errs = run(t, nil, nil, "forward", sock, port, "--", "echo", "ran")
	if code != 125 || out != "" || !strings.Contains(errs, "cannot listen on 127.0.0.1:"+port) {
		t.Fatalf("port in use: exit %d, stdout %q, stderr %q; want 125 and the reason", code, out, errs)
	}
	for _, bad := range []string{"0", "65536", "x"} {
		if code, _, errs := run(t, nil, nil, "forward", sock, bad, "--", "true"); code != 125 || !strings.Contains(errs, "not a TCP port") {
			t.Fatalf("port %q: exit %d %q", bad, code, errs)
		}
	}
	code, _, errs = run(t, nil, nil, "forward", sock, freePort(t), "--", "/no/such/program")
	if code != 127 || !strings.Contains(errs, "/no/such/program") {
		t.Fatalf("a missing command: exit %d %q", code, errs)
	}
}
