package kubernetes

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// lineServer answers each line it reads with "re:" and the line, on every
// connection, until the connection's write half closes.
func lineServer(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				sc.Buffer(nil, 1<<20)
				for sc.Scan() {
					if _, err := c.Write([]byte("re:" + sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// A read-only mount of a directory of the core's reaches the pod as a
// copy made before the sandbox starts; a socket in it is served in the
// pod and carried to the core's socket, several connections at once, with
// half-close; SyncMount brings the copy up to date.
func TestCopiedMountAndSocketRelay(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	grant, err := os.MkdirTemp("", "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(grant) })
	if err := os.MkdirAll(filepath.Join(grant, "python", "forge_tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(grant, "python", "forge_tools", "__init__.py"), []byte("v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lineServer(t, filepath.Join(grant, "bridge.sock"))
	s := specIn(hostWorkspace(t))
	s.Mounts = append(s.Mounts, runtime.Mount{Source: grant, Target: "/forge/tools", ReadOnly: true})
	id := cl.started(t, s)

	copied := filepath.Join(cl.root(id), "forge", "copy", "1")
	if b, err := os.ReadFile(filepath.Join(copied, "python", "forge_tools", "__init__.py")); err != nil || string(b) != "v1\n" {
		t.Fatalf("the copy holds %q, %v; want v1", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(cl.ws(id), "a.txt")); err != nil || string(b) != "alpha" {
		t.Fatalf("the workspace holds %q, %v beside the copy", b, err)
	}
	sock := filepath.Join(copied, "bridge.sock")
	if len(sock) > 100 {
		t.Skipf("socket path %s is too long for a unix socket here", sock)
	}
	st, err := os.Lstat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("nothing listens in the pod's copy once Start returned: %v %v", st, err)
	}

	// Two connections at once, each a round trip, then a half-close.
	var conns []*net.UnixConn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("connect to the relayed socket: %v", err)
		}
		defer c.Close()
		conns = append(conns, c.(*net.UnixConn))
	}
	for i, c := range conns {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := strings.Repeat("x", 100000) + string(rune('a'+i))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "re:"+msg+"\n" {
			t.Fatalf("connection %d read %d bytes, %v; want the %d-byte answer", i, len(line), err, len(msg)+4)
		}
	}
	if err := conns[0].CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conns[0].Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after a half-close the core's end should close too: read %d, %v", n, err)
	}

	// The grant changes: SyncMount copies it again.
	if err := os.WriteFile(filepath.Join(grant, "python", "forge_tools", "__init__.py"), []byte("v2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cl.c.SyncMount(ctx, id, "/forge/tools"); err != nil {
		t.Fatalf("SyncMount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(copied, "python", "forge_tools", "__init__.py")); err != nil || string(b) != "v2\n" {
		t.Fatalf("after SyncMount the copy holds %q, %v; want v2", b, err)
	}
	if st, err := os.Lstat(sock); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("SyncMount removed the relayed socket: %v", err)
	}
	if err := cl.c.SyncMount(ctx, id, "/work"); err == nil || !strings.Contains(err.Error(), "no copy at /work") {
		t.Errorf("SyncMount of a workspace mount: %v; want no copy there", err)
	}

	// Removing the pod ends the relay: the socket answers no more.
	if err := cl.c.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay ends with the pod", 5*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}
