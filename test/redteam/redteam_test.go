// Package redteam holds regression tests for what a hostile or careless MCP
// client found: each drives the real `mcp-forge serve` binary (FORGE_E2E=1)
// through the go-sdk client, as an outside tester would.
package redteam

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A resources/read whose URI holds a control character must be answered
// with an error, and the server must keep serving. The go-sdk's
// ResourceNotFoundError builds its JSON data with %q, which writes \x00 /
// \x7f escapes that are not JSON: marshalling the reply fails and the whole
// stdio session (every session and run of that host) ends.
func TestResourceReadControlCharacterURI(t *testing.T) {
	for _, uri := range []string{
		"mcp://forge/sessions/a\x00b/state", // the forge's own template handler
		"mcp://forge/sessions/a\x7fb/variables",
		"file:///\x01", // the SDK's fallback for URIs no resource matches
	} {
		t.Run(strings.ToValidUTF8(uri, "?"), func(t *testing.T) {
			s := testenv.StartServer(t, "")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := s.Session.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
				t.Errorf("reading %q succeeded", uri)
			}
			ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel2()
			if _, err := s.Session.ListTools(ctx2, nil); err != nil {
				t.Fatalf("after resources/read %q the server no longer answers: %v", uri, err)
			}
		})
	}
}

// A NUL byte in the code is the user's mistake: it must come back as the
// language's error (Python says "source code string cannot contain null
// bytes"), not as the runner crashing with its own traceback.
func TestNULInCodeIsAUserError(t *testing.T) {
	s := testenv.StartServer(t, "")
	var o struct {
		Stderr string `json:"stderr"`
		Error  struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	res := s.Call(t, "execute_python", map[string]any{"code": "x = 1\x00\n"}, &o)
	if !res.IsError {
		t.Fatal("code with a NUL byte ran")
	}
	if o.Error.Type == "ProcessExit" || strings.Contains(o.Stderr, "runner.py") {
		t.Errorf("the runner crashed instead of reporting the user's error: %+v", o)
	}
}

// A full /tmp (the tmpfs) is not a full working directory: the notice must
// not tell the user to write to /tmp when /tmp is what filled up.
func TestFullTmpNoticeIsTrue(t *testing.T) {
	s := testenv.StartServer(t, "")
	var o struct {
		Notices []string `json:"notices"`
	}
	res := s.Call(t, "execute_python", map[string]any{"code": "open('/tmp/f', 'wb').write(b'x' * (200 << 20))"}, &o)
	if !res.IsError {
		t.Fatal("writing past the /tmp size succeeded")
	}
	for _, n := range o.Notices {
		if strings.Contains(n, "write less, or to /tmp") {
			t.Errorf("the notice sends the user to the full /tmp: %q", n)
		}
	}
}

// Session code can run before a restarted kernel binds its sockets (the
// workspace survives a kernel death, and PYTHONPATH may point into it), so
// it can replace the kernel's ipc socket files with symlinks to any host
// path. The host-side plugin dials those paths as root outside the sandbox:
// it must never reach a host socket the sandbox names, and a kernel that
// does not come up must not hang the call past its bounds.
func TestKernelSocketSymlinksAreNotFollowed(t *testing.T) {
	s := testenv.StartServer(t, "")
	evil := filepath.Join(s.Base, "evil.sock")
	l, err := net.Listen("unix", evil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var got [][]byte
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 64)
			n, _ := c.Read(b)
			mu.Lock()
			got = append(got, b[:n])
			mu.Unlock()
			// Never answer: a peer that stalls the ZMTP handshake.
		}
	}()
	plant := "open('/forge/work/sitecustomize.py', 'w').write('''\nimport os\nfor n in range(1, 6):\n    p = '/forge/k/k-%d' % n\n    try:\n        os.unlink(p)\n    except OSError:\n        pass\n    os.symlink(" + strconv.Quote(evil) + ", p)\n''')"
	if res := s.Call(t, "execute_python", map[string]any{"code": plant, "session_id": "x", "environment": map[string]any{"PYTHONPATH": "/forge/work"}}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	s.Call(t, "execute_python", map[string]any{"code": "import os; os._exit(1)", "session_id": "x"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	start := time.Now()
	_, err = s.Session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1", "session_id": "x", "timeout": 30}})
	if err != nil {
		t.Errorf("the call after planting symlinks did not return in %v: %v", time.Since(start).Round(time.Second), err)
	} else if took := time.Since(start); took > 90*time.Second {
		t.Errorf("the call after planting symlinks took %v (the kernel dial is bounded at 60 s)", took.Round(time.Second))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Errorf("the host dialled a host socket named by sandboxed code %d times; first bytes %q", len(got), got[0])
	}
}
