package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A Python and an R session with 120-character session ids work through
// MCP as short ones do: execute, variables (resource), a file written by
// the code and read back, uploaded and read by the code, a checkpoint
// that a restarted server lists under the whole id and restores. Ids of
// 129 characters or with a character no id may hold are refused, audited
// with rule session-id, with a message saying what an id may be.
func TestLongSessionIDs(t *testing.T) {
	testenv.Parallel(t)
	base := testenv.BaseDir(t)
	s1 := testenv.StartServerAt(t, base, "")
	cs := s1.Session
	// Alike for their first 100 characters: their derived names must differ.
	ids := map[string]string{
		"python": strings.Repeat("p", 100) + "-python-0123456789ab",
		"r":      strings.Repeat("p", 100) + "-r-0123456789abcdefg",
	}
	code := map[string]struct{ set, get, write, read, want string }{
		"python": {"answer = 41", "answer + 1", "open('out.txt', 'w').write('from python')", "open('in.txt').read()", "'uploaded'"},
		"r":      {"answer <- 41", "answer + 1", "writeLines('from r', 'out.txt')", "readLines('in.txt')", `[1] "uploaded"`},
	}
	for lang, id := range ids {
		if len(id) != 120 {
			t.Fatalf("%s id has %d characters", lang, len(id))
		}
		c := code[lang]
		execIn(t, cs, lang, id, c.set)
		execIn(t, cs, lang, id, c.write)
		var d fileOut
		if res := testenv.Call(t, cs, "download_file", map[string]any{"session_id": id, "path": "out.txt"}, &d); res.IsError || strings.TrimSpace(d.Content) != "from "+lang {
			t.Fatalf("%s: download: %s %+v", lang, testenv.Text(res), d)
		}
		if res := testenv.Call(t, cs, "upload_file", map[string]any{"session_id": id, "path": "in.txt", "content": "uploaded"}, nil); res.IsError {
			t.Fatalf("%s: upload: %s", lang, testenv.Text(res))
		}
		if o := execIn(t, cs, lang, id, c.read); o.ResultRepr != c.want {
			t.Fatalf("%s: the code read %q", lang, o.ResultRepr)
		}
		var vars struct {
			Variables []struct {
				Name string `json:"name"`
			} `json:"variables"`
		}
		if err := readJSON(t, cs, "mcp://forge/sessions/"+id+"/variables", &vars); err != nil {
			t.Fatalf("%s: variables: %v", lang, err)
		}
		if !slices.ContainsFunc(vars.Variables, func(v struct {
			Name string `json:"name"`
		}) bool {
			return v.Name == "answer"
		}) {
			t.Fatalf("%s: variables: %+v", lang, vars)
		}
		var ck mcpserver.CheckpointOutput
		if res := testenv.Call(t, cs, "checkpoint_session", map[string]any{"session_id": id}, &ck); res.IsError || !slices.Contains(ck.Saved, "answer") {
			t.Fatalf("%s: checkpoint: %s %+v", lang, testenv.Text(res), ck)
		}
	}
	for _, bad := range []string{strings.Repeat("p", 129), strings.Repeat("p", 100) + "~x", "p.q", "-p"} {
		res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "1", "session_id": bad}, nil)
		if text := testenv.Text(res); !res.IsError || !strings.Contains(text, "session_id") || !strings.Contains(text, "1-128 letters, digits") {
			t.Errorf("session_id of %d characters %.8q…: %s", len(bad), bad, text)
		}
	}
	if !refusedWith(t, filepath.Join(base, "audit.log"), "execute_python", "session-id") {
		t.Error("no refusal audited with rule session-id")
	}
	if err := cs.Close(); err != nil {
		t.Fatalf("the server did not exit cleanly: %v", err)
	}

	cs = testenv.StartServerAt(t, base, "").Session
	want := []string{ids["python"], ids["r"]}
	slices.Sort(want)
	if l := listSessions(t, cs); !slices.Equal(checkpointIDs(l), want) {
		t.Fatalf("after the restart, want the checkpoints %v: %+v", want, l)
	}
	for lang, id := range ids {
		o := execIn(t, cs, lang, id, code[lang].get)
		if !strings.Contains(o.ResultRepr, "42") || !strings.Contains(strings.Join(o.Notices, " "), "restored") {
			t.Errorf("%s after the restart: %q, notices %q", lang, o.ResultRepr, o.Notices)
		}
		var d fileOut
		if res := testenv.Call(t, cs, "download_file", map[string]any{"session_id": id, "path": "in.txt"}, &d); res.IsError || d.Content != "uploaded" {
			t.Errorf("%s: the uploaded file after the restart: %s %+v", lang, testenv.Text(res), d)
		}
	}
}
