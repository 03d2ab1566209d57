package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// After stateless runs (through a stateless plugin and through the throw-
// away sessions of session backends, ours and a third party's) only the
// workspaces of live sessions exist under <base>/sessions, and after those
// sessions are destroyed nothing does. The jupyter backend used to leave one
// workspace per stateless run. The bash plugin, loaded by [plugins.bash]
// with a pinned sha256, keeps `export X=1` for the next call. The warm
// kernels of the session pools wait in pool workspaces (at most one per
// pool); they are not leftovers.
func TestNothingLeftUnderBase(t *testing.T) {
	testenv.Require(t)
	bin := testenv.BuildPlugin(t, "./testdata/bashplugin")
	sum, err := plugins.Checksum(bin)
	if err != nil {
		t.Fatal(err)
	}
	// bash has sessions only: a call without session_id runs in a throw-away
	// session when the configuration makes it the stateless default.
	s := testenv.StartServer(t, coldConfig+"[execution.default_backend]\nbash = \"bash\"\n[plugins.bash]\npath = \""+bin+"\"\nsha256 = \""+sum+"\"\n")
	call := func(tool string, args map[string]any) out {
		t.Helper()
		var o out
		if res := s.Call(t, tool, args, &o); res.IsError || !o.Success {
			t.Fatalf("%s %v: %s", tool, args, testenv.Text(res))
		}
		return o
	}
	call("execute_python", map[string]any{"code": "print(1)"})
	call("execute_python", map[string]any{"code": "print(2)", "backend": "jupyter"})
	call("execute_bash", map[string]any{"code": "echo 3"})
	call("execute_python", map[string]any{"code": "x = 1", "session_id": "py1"})
	call("execute_bash", map[string]any{"code": "export X=41", "session_id": "sh1"})
	if o := call("execute_bash", map[string]any{"code": "echo $((X + 1))", "session_id": "sh1"}); o.Stdout != "42\n" {
		t.Fatalf("bash session state: %+v", o)
	}
	dir := filepath.Join(s.Base, "sessions")
	// py1's workspace is its own, or the pool workspace of the warm kernel
	// it took (session.create says which).
	py1 := ""
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == "session.create" && e.Details["session"] == "py1" {
			py1, _ = e.Details["workspace"].(string)
			if py1 == "" {
				py1 = e.SessionID
			}
		}
	}
	list := func() []string {
		entries, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		var names []string
		pooled := 0
		for _, e := range entries {
			// The warm kernels of the jupyter and irkernel pools (one each)
			// wait in workspaces of their own, named by a pool id; a session
			// that took one has that workspace and no other.
			if strings.HasPrefix(e.Name(), "wp") && !strings.HasPrefix(e.Name(), py1+".") {
				pooled++
				continue
			}
			names = append(names, e.Name())
		}
		if pooled > 2 {
			t.Errorf("%d pool workspaces under %s, more than the two pools hold", pooled, dir)
		}
		sort.Strings(names)
		return names
	}
	// A stateless run's workspace goes with its container, just after the
	// result came back.
	if !poll(30*time.Second, func() bool { return len(list()) == 2 }) || !slices.ContainsFunc(list(), func(n string) bool { return strings.HasPrefix(n, py1+".") }) {
		t.Fatalf("want only the two live sessions' workspaces under %s (py1's is %s), got %v", dir, py1, list())
	}
	for _, id := range []string{"py1", "sh1"} {
		if res := s.Call(t, "destroy_session", map[string]any{"session_id": id}, nil); res.IsError {
			t.Fatalf("destroy %s: %s", id, testenv.Text(res))
		}
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("left under %s after destroy: %v", dir, got)
	}
}
