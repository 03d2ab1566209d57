package sdktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// runDial is RunHost's Dial part: the suite listens where the sandbox
// would (the endpoint's place in the workspace) and checks that a plugin
// reaches its own declared endpoints, both ways and with half-close, and
// nothing else.
func runDial(t *testing.T, s HostUnderTest, start func(*testing.T, host.Intent) host.Container) {
	if s.WorkspaceOf == nil {
		t.Skip("declared: no WorkspaceOf, so the suite cannot play the sandbox's side")
	}
	sb := s.Host.Sandbox()
	ctx := context.Background()
	in := host.Intent{Image: s.Image, Command: []string{"sleep", "60"}, WorkDir: "/forge/work",
		Mounts:    []host.Mount{{Subdir: "work", Target: "/forge/work"}, {Subdir: "ro", Target: "/forge/ro", ReadOnly: true}},
		Endpoints: []host.Endpoint{{Name: "echo", Path: "/forge/work/chan/echo"}, {Name: "late", Path: "/forge/work/late"}}}
	c := start(t, in)
	ws := s.WorkspaceOf(c.ID)
	os.MkdirAll(filepath.Join(ws, "work", "chan"), 0o755)

	if _, err := sb.Dial(ctx, c.ID, "late"); kindOf(err) != host.KindUnavailable {
		t.Errorf("Dial before the sandbox listens = %v; want unavailable (retry)", err)
	}
	echo := listenUnix(t, filepath.Join(ws, "work", "chan", "echo"))
	t.Run("both ways", func(t *testing.T) {
		conn, err := sb.Dial(ctx, c.ID, "echo")
		if err != nil {
			t.Fatalf("Dial of a declared endpoint: %v", err)
		}
		defer conn.Close()
		// More than one chunk each way, then a half-close: the sandbox
		// answers only once it has read everything.
		msg := bytes.Repeat([]byte("0123456789abcdef"), 3*host.DialChunk/16+5)
		if n, err := conn.Write(msg); err != nil || n != len(msg) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if err := closeWrite(conn); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadAll(conn)
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		if want := append([]byte(fmt.Sprintf("%d:", len(msg))), msg...); !bytes.Equal(got, want) {
			t.Fatalf("answer of %d bytes; want %d (the length, then the bytes back)", len(got), len(want))
		}
	})
	t.Run("read deadline", func(t *testing.T) {
		conn, err := sb.Dial(ctx, c.ID, "echo")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		var ne net.Error
		if _, err := conn.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read past its deadline = %v; want a timeout", err)
		}
		// The connection survives a deadline.
		conn.SetReadDeadline(time.Time{})
		conn.Write([]byte("x"))
		closeWrite(conn)
		if got, err := io.ReadAll(conn); err != nil || string(got) != "1:x" {
			t.Fatalf("after a deadline: %q, %v", got, err)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		if _, err := sb.Dial(ctx, c.ID, "undeclared"); kindOf(err) != host.KindNotFound {
			t.Errorf("Dial of an undeclared endpoint = %v; want not-found", err)
		}
		if s.Other != nil {
			if conn, err := s.Other.Sandbox().Dial(ctx, c.ID, "echo"); kindOf(err) != host.KindNotFound {
				if conn != nil {
					conn.Close()
				}
				t.Errorf("another plugin's Dial = %v; want not-found", err)
			}
		}
		for name, path := range map[string]string{"outside the mounts": "/tmp/s", "in a read-only mount": "/forge/ro/s", "a mount target itself": "/forge/work"} {
			bad := in
			bad.Endpoints = []host.Endpoint{{Name: "bad", Path: path}}
			if c, err := sb.Create(ctx, bad); kindOf(err) != host.KindInvalid {
				if err == nil {
					sb.Remove(ctx, c.ID)
				}
				t.Errorf("Create with an endpoint %s = %v; want an invalid-request refusal", name, err)
			}
		}
	})
	t.Run("planted link", func(t *testing.T) {
		// Code in the sandbox replaces its socket with a link to a socket
		// of the host's: the dial must not reach it.
		other := listenUnix(t, filepath.Join(t.TempDir(), "host.sock"))
		sock := filepath.Join(ws, "work", "late")
		if err := os.Symlink(other.path, sock); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(sock)
		if conn, err := sb.Dial(ctx, c.ID, "late"); kindOf(err) != host.KindPolicy {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("Dial of a link planted in place of the socket = %v; want a policy refusal", err)
		}
		os.Remove(sock)
		os.WriteFile(sock, []byte("not a socket"), 0o644)
		if _, err := sb.Dial(ctx, c.ID, "late"); kindOf(err) != host.KindPolicy {
			t.Errorf("Dial of a file in place of the socket = %v; want a policy refusal", err)
		}
		if n := other.accepted(); n != 0 {
			t.Fatalf("the host's socket behind the link got %d connections", n)
		}
	})
	if echo.accepted() == 0 {
		t.Error("the endpoint's listener saw no connection")
	}
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection cannot half-close (no CloseWrite)")
}

// unixListener answers each connection with the length of what it read
// until the half-close, a colon and the bytes back.
type unixListener struct {
	path  string
	count chan struct{}
}

func (l *unixListener) accepted() int { return len(l.count) }

// listenUnix listens at path, however long: it binds through the
// directory's /proc/self/fd link (sun_path holds 107 bytes).
func listenUnix(t *testing.T, path string) *unixListener {
	t.Helper()
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	l, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir, filepath.Base(path)))
	if err != nil {
		t.Fatal(err)
	}
	// The listener's own name is the /proc path, meaningless after this
	// call: remove the socket by its real path.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	t.Cleanup(func() { l.Close(); syscall.Unlink(path) })
	ul := &unixListener{path: path, count: make(chan struct{}, 1000)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ul.count <- struct{}{}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c)
				c.Write(append([]byte(fmt.Sprintf("%d:", len(data))), data...))
			}()
		}
	}()
	return ul
}
