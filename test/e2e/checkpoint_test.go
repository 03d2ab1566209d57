package e2e

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A session's DataFrame, function, hidden variables, RNG state and
// attached packages (R) survive checkpoint and restore into a new kernel;
// an open file handle is reported as not saved; another connection can
// neither checkpoint nor restore it; destroy removes it.
func TestCheckpointRestore(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	alice, bob := p.Connect(t), p.Connect(t)
	exec := func(cs *mcp.ClientSession, tool, sid, code string) out {
		t.Helper()
		var o out
		if res := testenv.Call(t, cs, tool, map[string]any{"code": code, "session_id": sid}, &o); res.IsError {
			t.Fatalf("%s\n%+v", testenv.Text(res), o)
		}
		return o
	}
	ckpt := func(cs *mcp.ClientSession, tool, sid string) (mcpserver.CheckpointOutput, *mcp.CallToolResult) {
		t.Helper()
		var o mcpserver.CheckpointOutput
		res := testenv.Call(t, cs, tool, map[string]any{"session_id": sid}, &o)
		return o, res
	}
	for _, c := range []struct {
		lang, sid, setup, handle, check, want string
		saved                                 []string
	}{
		{"python", "pyck", "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ndef double(x):\n    return x * 2\nfh = open('notes.txt', 'w')\nfh.write('hi')",
			"fh", "double(int(df.a.sum()))", "12", []string{"df", "double"}},
		// A dot-name, the RNG's state (.Random.seed) and an attached
		// package are state too: runif(1) after set.seed(7) is 0.9889 and
		// toJSON comes from library(jsonlite).
		{"r", "rck", "library(jsonlite)\nd <- data.frame(x = 1:3)\nf <- function(v) v * 10\n.k <- 2\nset.seed(7)\ncon <- file('c.txt', 'w')",
			"con", "c(f(sum(d$x)), .k, round(runif(1), 4), nchar(toJSON(1)))", "[1] 60.0000  2.0000  0.9889  3.0000", []string{"d", "f", ".k", ".Random.seed"}},
	} {
		t.Run(c.lang, func(t *testing.T) {
			tool := "execute_" + c.lang
			exec(alice, tool, c.sid, c.setup)
			if _, res := ckpt(bob, "checkpoint_session", c.sid); !res.IsError {
				t.Fatal("another connection checkpointed the session")
			}
			o, res := ckpt(alice, "checkpoint_session", c.sid)
			if res.IsError {
				t.Fatalf("checkpoint: %s", testenv.Text(res))
			}
			whole := testenv.GVisor() // a snapshot of the sandbox: nothing is left out
			switch {
			case whole && o.Kind != "snapshot":
				t.Errorf("a gVisor session's checkpoint is not a snapshot: %+v", o)
			case !whole && (o.Kind != "variables" || !testenv.Kube() && !strings.Contains(o.NotWhole, "runc")):
				t.Errorf("a runc session's checkpoint does not say it holds variables and why: %+v", o)
			}
			for _, v := range c.saved {
				if !whole && !strings.Contains(strings.Join(o.Saved, ","), v) {
					t.Errorf("%s not saved: %+v", v, o)
				}
			}
			if why := o.Skipped[c.handle]; !whole && (why == "" || !strings.Contains(testenv.Text(res), c.handle)) {
				t.Errorf("the open handle %s is not reported as not saved: %+v", c.handle, o)
			}
			// A fresh namespace, then the checkpoint back in a new kernel.
			if res := testenv.Call(t, alice, "restart_session", map[string]any{"session_id": c.sid}, nil); res.IsError {
				t.Fatal(testenv.Text(res))
			}
			if _, res := ckpt(bob, "restore_session", c.sid); !res.IsError {
				t.Fatal("another connection restored the session")
			}
			r, res := ckpt(alice, "restore_session", c.sid)
			if res.IsError || !whole && (!strings.Contains(r.Notice, "new kernel") || !strings.Contains(r.Notice, c.handle)) || whole && !strings.Contains(r.Notice, "snapshot") {
				t.Fatalf("restore: %s %+v", testenv.Text(res), r)
			}
			if got := exec(alice, tool, c.sid, c.check); got.ResultRepr != c.want {
				t.Fatalf("%s after restore: %q (%+v)", c.check, got.ResultRepr, got)
			}
			var d fileOut
			testenv.Call(t, alice, "download_file", map[string]any{"session_id": c.sid, "path": ".forge-checkpoint"}, &d)
			if d.Error == nil {
				t.Error("the namespace file was left in the working directory")
			}
			if res := testenv.Call(t, alice, "destroy_session", map[string]any{"session_id": c.sid}, nil); res.IsError {
				t.Fatal(testenv.Text(res))
			}
			if _, res := ckpt(alice, "restore_session", c.sid); !res.IsError {
				t.Fatal("a destroyed session's checkpoint was restored")
			}
		})
	}
}
