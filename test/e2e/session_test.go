package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// sessionContainers lists the containers of the sessions a client calls id
// among those of servers on base (other servers' sessions may share the
// id). The label holds the session's internal id: the user's id, '-' and a
// hash of owner and id (session.InternalID), so every owner's "id" matches.
// A session that took a warm kernel has the container of that kernel,
// labelled with the pool id it was started under; the session.create audit
// entry (servers on base share base/audit.log) names that pool workspace.
func sessionContainers(t *testing.T, base, id string) []string {
	t.Helper()
	sandboxes := testenv.Sandboxes(t, map[string]string{"io.mcp-forge.instance": forge.Instance(base)})
	internal := regexp.MustCompile("^" + regexp.QuoteMeta(id) + "-[0-9a-f]{16}$")
	pooled := map[string]bool{}
	if _, err := os.Stat(filepath.Join(base, "audit.log")); err == nil {
		for _, e := range auditEntries(t, filepath.Join(base, "audit.log")) {
			if w, _ := e.Details["workspace"].(string); e.Event == "session.create" && w != "" && internal.MatchString(e.SessionID) {
				pooled[w] = true
			}
		}
	}
	var ids []string
	for _, c := range sandboxes {
		if sid := c.Labels["io.mcp-forge.session"]; internal.MatchString(sid) || pooled[sid] {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

func readJSON(t *testing.T, cs *mcp.ClientSession, uri string, v any) error {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(res.Contents[0].Text), v)
}

// sessionCaller runs code in a session through tool and decodes the result.
func sessionCaller(t *testing.T, s *testenv.Server, tool string) func(code, sid string, timeout int) (out, *mcp.CallToolResult) {
	return func(code, sid string, timeout int) (out, *mcp.CallToolResult) {
		args := map[string]any{"code": code, "session_id": sid}
		if timeout > 0 {
			args["timeout"] = timeout
		}
		var o out
		res := s.Call(t, tool, args, &o)
		return o, res
	}
}

func TestPythonSessions(t *testing.T) {
	testenv.Parallel(t)
	s := testenv.StartServer(t, "")
	call := sessionCaller(t, s, "execute_python")

	t.Run("state persists", func(t *testing.T) {
		if o, res := call("x = 41", "a", 0); res.IsError {
			t.Fatalf("%s (%+v)", testenv.Text(res), o)
		}
		if o, _ := call("x + 1", "a", 0); o.Result != "42" {
			t.Fatalf("x + 1 = %#v", o.Result)
		}
	})
	t.Run("isolation", func(t *testing.T) {
		call("x = 'other'", "b", 0)
		if o, _ := call("x", "a", 0); o.ResultRepr != "41" {
			t.Fatalf("session a sees %q", o.ResultRepr)
		}
		if o, _ := call("x", "b", 0); o.ResultRepr != "'other'" {
			t.Fatalf("session b sees %q", o.ResultRepr)
		}
		ca, cb := sessionContainers(t, s.Base, "a"), sessionContainers(t, s.Base, "b")
		if len(ca) != 1 || len(cb) != 1 || ca[0] == cb[0] {
			t.Fatalf("containers a=%v b=%v", ca, cb)
		}
	})
	t.Run("plot as image", func(t *testing.T) {
		_, res := call("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()", "a", 0)
		n := 0
		for _, c := range res.Content {
			if im, ok := c.(*mcp.ImageContent); ok && im.MIMEType == "image/png" && string(im.Data[1:4]) == "PNG" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("want 1 PNG, got %d: %s", n, testenv.Text(res))
		}
	})
	t.Run("error line", func(t *testing.T) {
		o, res := call("y = 1\nz = y / 0", "a", 0)
		if !res.IsError || o.ExitCode != 1 || o.Error == nil || o.Error.Type != "ZeroDivisionError" || o.Error.Line != 2 {
			t.Fatalf("%+v", o.Error)
		}
	})
	t.Run("timeout interrupts and keeps state", func(t *testing.T) {
		call("kept = 'yes'", "a", 0)
		start := time.Now()
		o, res := call("import time\nfor i in range(600):\n    time.sleep(0.1)", "a", 2)
		if !res.IsError || o.ExitCode == 0 || o.Error == nil || o.Error.Type != "Timeout" || !strings.Contains(o.Error.Message, "state is kept") {
			t.Fatalf("%+v", o.Error)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("interrupt took %s", d)
		}
		if o, _ := call("kept", "a", 0); o.ResultRepr != "'yes'" {
			t.Fatalf("state lost: %+v", o)
		}
	})
	t.Run("document_state and resources", func(t *testing.T) {
		call("import pandas as pd\nimport numpy as np\ndf = pd.DataFrame({'n': [1, 2, 3], 's': ['a', 'b', 'c']})\narr = np.zeros((2, 3))\n_hidden = 1", "a", 0)
		var v mcpserver.SessionView
		res := s.Call(t, "document_state", map[string]any{"session_id": "a", "variables": map[string]string{"df": "three rows of test data"}, "note": "exploring"}, &v)
		if res.IsError || v.Documented["df"] != "three rows of test data" || v.Note != "exploring" {
			t.Fatalf("%s", testenv.Text(res))
		}
		var st mcpserver.SessionView
		if err := readJSON(t, s.Session, "mcp://forge/sessions/a/state", &st); err != nil {
			t.Fatal(err)
		}
		if st.Documented["df"] == "" || st.Note != "exploring" || st.DocumentationUpdated.IsZero() || st.IntrospectedAt.IsZero() {
			t.Fatalf("state resource: %+v", st)
		}
		var vars struct {
			Variables []struct {
				Name    string         `json:"name"`
				Type    string         `json:"type"`
				Size    int64          `json:"size_bytes"`
				Repr    string         `json:"repr"`
				Details map[string]any `json:"details"`
			} `json:"variables"`
		}
		if err := readJSON(t, s.Session, "mcp://forge/sessions/a/variables", &vars); err != nil {
			t.Fatal(err)
		}
		byName := map[string]int{}
		for i, v := range vars.Variables {
			byName[v.Name] = i
			if strings.HasPrefix(v.Name, "_") || v.Name == "pd" || v.Name == "np" {
				t.Errorf("%s should be hidden", v.Name)
			}
			if len(v.Repr) > 100 {
				t.Errorf("%s repr is %d characters", v.Name, len(v.Repr))
			}
		}
		df := vars.Variables[byName["df"]]
		if df.Type != "pandas.core.frame.DataFrame" || df.Details["rows"] != float64(3) || len(df.Details["columns"].([]any)) != 2 || df.Size <= 0 {
			t.Errorf("df: %+v", df)
		}
		arr := vars.Variables[byName["arr"]]
		if arr.Details["dtype"] != "float64" || arr.Size != 48 {
			t.Errorf("arr: %+v", arr)
		}
		if err := readJSON(t, s.Session, "mcp://forge/sessions/nope/state", &st); err == nil {
			t.Error("unknown session: no error")
		}
	})
	t.Run("memory bomb kills the session, server carries on", func(t *testing.T) {
		o, res := call("blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))", "a", 60)
		if !res.IsError || o.Error == nil || o.Error.Type != "OutOfMemory" || !strings.Contains(o.Error.Message, "512m") {
			t.Fatalf("%+v %s", o.Error, testenv.Text(res))
		}
		o, res = call("'alive'", "a", 0)
		if res.IsError || o.ResultRepr != "'alive'" || len(o.Notices) == 0 || !strings.Contains(o.Notices[0], "restarted") {
			t.Fatalf("after OOM: %+v %s", o, testenv.Text(res))
		}
		if o, _ := call("'kept' in dir()", "a", 0); o.ResultRepr != "False" {
			t.Fatalf("state should be gone: %+v", o)
		}
		if res := s.Call(t, "execute_python", map[string]any{"code": "6*7"}, nil); res.IsError {
			t.Fatalf("stateless run after a session OOM: %s", testenv.Text(res))
		}
	})
	t.Run("os._exit is detected", func(t *testing.T) {
		call("v = 1", "c", 0)
		o, res := call("import os\nos._exit(3)", "c", 0)
		if !res.IsError || o.Error == nil || o.Error.Type != "KernelDied" || !strings.Contains(o.Error.Message, "code 3") {
			t.Fatalf("%+v", o.Error)
		}
		if o, _ := call("'v' in dir()", "c", 0); o.ResultRepr != "False" || len(o.Notices) == 0 {
			t.Fatalf("after the kernel died: %+v", o)
		}
	})
	t.Run("code that swallows the interrupt is stopped", func(t *testing.T) {
		code := "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except KeyboardInterrupt:\n        pass"
		start := time.Now()
		o, res := call(code, "c", 2)
		if !res.IsError || o.ExitCode == 0 || o.Error == nil || o.Error.Type != "Timeout" || !strings.Contains(o.Error.Message, "state is lost") {
			t.Fatalf("%+v", o.Error)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("took %s", d)
		}
		if o, res := call("1 + 1", "c", 0); res.IsError || o.Result != "2" {
			t.Fatalf("session not usable after the kill: %s", testenv.Text(res))
		}
	})
	t.Run("restart and destroy", func(t *testing.T) {
		call("r = 1", "b", 0)
		if res := s.Call(t, "restart_session", map[string]any{"session_id": "b"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		if o, _ := call("'r' in dir()", "b", 0); o.ResultRepr != "False" {
			t.Fatalf("namespace not cleared: %+v", o)
		}
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "b"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		if c := sessionContainers(t, s.Base, "b"); len(c) != 0 {
			t.Fatalf("container left: %v", c)
		}
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "b"}, nil); !res.IsError {
			t.Fatal("destroying twice should fail")
		}
	})
	t.Run("destroy interrupts running code", func(t *testing.T) {
		call("x = 1", "d", 0)
		done := make(chan *mcp.CallToolResult, 1)
		go func() { _, res := call("import time\nwhile True:\n    time.sleep(0.05)", "d", 120); done <- res }()
		testenv.WaitFor(t, "the session to be busy", 30*time.Second, func() bool {
			var st struct {
				State string `json:"state"`
			}
			return readJSON(t, s.Session, "mcp://forge/sessions/d/state", &st) == nil && st.State == "busy"
		})
		begin := time.Now()
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": "d"}, nil); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		if d := time.Since(begin); d > 15*time.Second {
			t.Fatalf("destroy waited %s for the running code", d)
		}
		if res := <-done; !res.IsError {
			t.Fatalf("the interrupted call succeeded: %s", testenv.Text(res))
		}
		if c := sessionContainers(t, s.Base, "d"); len(c) != 0 {
			t.Fatalf("container left: %v", c)
		}
	})
	t.Run("bad session id", func(t *testing.T) {
		_, res := call("1", "../etc", 0)
		if !res.IsError || !strings.Contains(testenv.Text(res), "session_id") {
			t.Fatal(testenv.Text(res))
		}
	})
}

func TestIdleReaper(t *testing.T) {
	s := testenv.StartServer(t, "[sessions]\nidle_timeout = 2\ncleanup_interval = 1\n")
	if res := s.Call(t, "execute_python", map[string]any{"code": "x = 1", "session_id": "idle1"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if len(sessionContainers(t, s.Base, "idle1")) != 1 {
		t.Fatal("no session container")
	}
	testenv.WaitFor(t, "the idle session to be reaped", 20*time.Second, func() bool {
		var l struct{ Sessions []any }
		s.Call(t, "list_sessions", map[string]any{}, &l)
		return len(sessionContainers(t, s.Base, "idle1")) == 0 && len(l.Sessions) == 0
	})
}

func TestMaxConcurrentSessions(t *testing.T) {
	s := testenv.StartServer(t, "[sessions]\nmax_concurrent = 1\n")
	if res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "one"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "two"}, nil)
	if !res.IsError || !strings.Contains(testenv.Text(res), "sessions.max_concurrent") {
		t.Fatal(testenv.Text(res))
	}
}

// Sessions belong to the MCP connection that created them.
func TestSessionOwnership(t *testing.T) {
	p := testenv.NewInProcess(t, nil)
	alice, bob := p.Connect(t), p.Connect(t)
	if res := testenv.Call(t, alice, "execute_python", map[string]any{"code": "secret = 's3'", "session_id": "mine"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	var st mcpserver.SessionView
	if err := readJSON(t, bob, "mcp://forge/sessions/mine/state", &st); err == nil {
		t.Fatalf("another connection read the session: %+v", st)
	}
	if res := testenv.Call(t, bob, "destroy_session", map[string]any{"session_id": "mine"}, nil); !res.IsError {
		t.Fatal("another connection destroyed the session")
	} else if unknown := testenv.Call(t, bob, "destroy_session", map[string]any{"session_id": "nobodys"}, nil); testenv.Text(res) != strings.ReplaceAll(testenv.Text(unknown), "nobodys", "mine") {
		t.Fatalf("another connection's session should answer like an unknown one: %q / %q", testenv.Text(res), testenv.Text(unknown))
	}
	// The same id in another connection is a session of its own.
	if res := testenv.Call(t, bob, "execute_python", map[string]any{"code": "secret", "session_id": "mine"}, nil); !res.IsError || strings.Contains(testenv.Text(res), "s3") || !strings.Contains(testenv.Text(res), "NameError") {
		t.Fatalf("another connection ran in the session: %s", testenv.Text(res))
	}
	var o out
	testenv.Call(t, alice, "execute_python", map[string]any{"code": "secret", "session_id": "mine"}, &o)
	if o.ResultRepr != "'s3'" {
		t.Fatalf("owner lost the session: %+v", o)
	}
}

// Sessions are namespaced by connection: two connections both using "main"
// get a session each, with their own variables, kernel and container, and
// destroying one leaves the other.
func TestSameSessionIDTwoConnections(t *testing.T) {
	var base string
	p := testenv.NewInProcess(t, func(c *config.Config) { base = c.Volumes.BasePath })
	alice, bob := p.Connect(t), p.Connect(t)
	run := func(cs *mcp.ClientSession, code string) out {
		t.Helper()
		var o out
		if res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "session_id": "main"}, &o); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		return o
	}
	run(alice, "x = 'alice'")
	run(bob, "x = 'bob'")
	if o := run(alice, "x"); o.ResultRepr != "'alice'" {
		t.Fatalf("alice's main: %+v", o)
	}
	if o := run(bob, "x"); o.ResultRepr != "'bob'" {
		t.Fatalf("bob's main: %+v", o)
	}
	if c := sessionContainers(t, base, "main"); len(c) != 2 {
		t.Fatalf("want a container per connection, got %v", c)
	}
	for _, cs := range []*mcp.ClientSession{alice, bob} {
		var list struct {
			Sessions []mcpserver.SessionView `json:"sessions"`
		}
		testenv.Call(t, cs, "list_sessions", map[string]any{}, &list)
		if len(list.Sessions) != 1 || list.Sessions[0].ID != "main" || list.Sessions[0].Executions != 2 {
			t.Fatalf("list: %+v", list.Sessions)
		}
		var st mcpserver.SessionView
		if err := readJSON(t, cs, "mcp://forge/sessions/main/variables", &st); err != nil || st.ID != "main" || len(st.Variables) != 1 || st.Variables[0].Name != "x" {
			t.Fatalf("variables: %v %+v", err, st)
		}
	}
	if res := testenv.Call(t, bob, "destroy_session", map[string]any{"session_id": "main"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if c := sessionContainers(t, base, "main"); len(c) != 1 {
		t.Fatalf("after bob's destroy: %v", c)
	}
	if o := run(alice, "x"); o.ResultRepr != "'alice'" {
		t.Fatalf("alice's main after bob's destroy: %+v", o)
	}
	// bob's next call starts a new, empty session
	var o out
	testenv.Call(t, bob, "execute_python", map[string]any{"code": "x", "session_id": "main"}, &o)
	if o.Error == nil || !strings.Contains(o.Error.Type+o.Error.Message, "NameError") {
		t.Fatalf("bob's new main: %+v", o)
	}
}

// A server killed without cleanup, whose watchdog died with it, leaves its
// session container; the next server on the same base path removes it at
// start.
func TestNoOrphansAfterRestart(t *testing.T) {
	s := testenv.StartServer(t, "")
	if res := s.Call(t, "execute_python", map[string]any{"code": "x = 1", "session_id": "orphan"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if len(sessionContainers(t, s.Base, "orphan")) != 1 {
		t.Fatal("no session container")
	}
	for _, pid := range childrenMatching(s.Cmd.Process.Pid, "watchdog") {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	killPluginsAtEnd(t, s.Cmd.Process.Pid)
	s.Cmd.Process.Signal(syscall.SIGKILL)
	s.Cmd.Wait()
	for _, pid := range testenv.ChildPids(s.Cmd.Process.Pid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(sessionContainers(t, s.Base, "orphan")) != 1 {
		t.Fatal("the killed server's container should still exist before the restart")
	}
	p := testenv.NewInProcess(t, func(c *config.Config) { c.Volumes.BasePath = s.Base })
	_ = p
	if c := sessionContainers(t, s.Base, "orphan"); len(c) != 0 {
		t.Fatalf("orphan containers left after restart: %v", c)
	}
}

// Two servers on one base path (two MCP hosts on one machine) that both
// use session id "main" never share its files, and one destroying its
// session leaves the other's alone.
func TestServersShareBasePathSafely(t *testing.T) {
	a := testenv.StartServer(t, "")
	b := testenv.StartServerAt(t, a.Base, "")
	ca, cb := sessionCaller(t, a, "execute_python"), sessionCaller(t, b, "execute_python")
	if _, res := ca("open('mine.txt', 'w').write('from a')", "main", 0); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if o, res := cb("import os\nsorted(os.listdir('.'))", "main", 0); res.IsError || strings.Contains(o.ResultRepr, "mine.txt") {
		t.Fatalf("server b sees server a's session files: %+v %s", o, testenv.Text(res))
	}
	if res := b.Call(t, "destroy_session", map[string]any{"session_id": "main"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if o, res := ca("open('mine.txt').read()", "main", 0); res.IsError || o.ResultRepr != "'from a'" {
		t.Fatalf("server a lost its session files: %+v %s", o, testenv.Text(res))
	}
}
