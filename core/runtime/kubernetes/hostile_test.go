package kubernetes

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// An exec's environment (a run's `environment`, which the core treats as
// secrets: runtime.Scrubber) must not travel in the exec's command: the
// command is the query string of the API server's exec URL, which its
// audit log records (requestURI, at every level from Metadata up) and
// proxies and the kubelet log.
func TestExecEnvNotInCommand(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	res, err := cl.c.Exec(context.Background(), id, runtime.ExecRequest{Command: []string{"sh", "-c", `test "$API_KEY" = ` + secret}, Env: map[string]string{"API_KEY": secret}, Max: 1 << 20})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec: %v, exit %d %s (the variable did not arrive)", err, res.ExitCode, res.Stderr)
	}
	for _, c := range cl.served() {
		for _, arg := range c.Command {
			if strings.Contains(arg, secret) && !strings.Contains(arg, "test ") {
				t.Errorf("the exec's command carries the environment value: %q (it is in the exec URL, hence in the API server's audit log)", arg)
			}
		}
	}
}

// A relay ends with the caller's connection: a sandbox's server that
// accepts, keeps talking and never closes must not keep the exec (an API
// server stream, a keeper process, the core's goroutines) alive after the
// plugin closed its end.
func TestDialSocketCallerCloseEndsRelay(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	sock := cl.ws(id, "chan", "chatty.sock")
	if len(sock) > 100 {
		t.Skipf("socket path %s is too long for a unix socket here", sock)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	conn, err := cl.c.DialSocket(context.Background(), id, "/forge/chan/chatty.sock")
	if err != nil {
		t.Fatalf("DialSocket: %v", err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1<<20)); err != nil {
		t.Fatalf("read: %v", err)
	}
	conn.Close()
	waitFor(t, "the relay ends with the caller's connection", 10*time.Second, func() bool { return cl.live(id) == 0 })
}
