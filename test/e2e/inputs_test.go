package e2e

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A stateless run reads input files uploaded in the same call (text and
// base64) and copied from a session of the caller's; it cannot change
// them; a '..' path, a link in the session and another connection's
// session are refused.
func TestStatelessInputFiles(t *testing.T) {
	p := testenv.NewInProcess(t, nil)
	alice, bob := p.Connect(t), p.Connect(t)
	execIn(t, alice, "python", "src", "import os\nwith open('result.csv', 'w') as f:\n    f.write('x\\n1\\n2\\n3\\n')\nos.symlink('/etc/passwd', 'link.txt')")

	run := func(args map[string]any) (out, string, bool) {
		t.Helper()
		var o out
		res := testenv.Call(t, alice, "execute_python", args, &o)
		return o, testenv.Text(res), res.IsError
	}
	code := `import pandas as pd
s = int(pd.read_csv('data/in.csv').a.sum()) + len(open('blob.bin', 'rb').read()) + int(pd.read_csv('from_session.csv').x.sum())
try:
    open('data/in.csv', 'a').write('9')
    ro = 'writable'
except OSError as e:
    import errno
    ro = errno.errorcode[e.errno]
(s, ro)`
	o, text, isErr := run(map[string]any{"code": code, "input_files": []map[string]any{
		{"path": "data/in.csv", "content": "a\n10\n20\n"},
		{"path": "blob.bin", "content": base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}), "encoding": "base64"},
		{"path": "from_session.csv", "from_session": "src", "source_path": "result.csv"},
	}})
	if isErr || !o.Success || o.ResultRepr != "(40, 'EROFS')" {
		t.Fatalf("want (30+4+6, EROFS), got %q: %s %+v", o.ResultRepr, text, o)
	}

	for _, c := range []struct {
		name string
		file map[string]any
		want string
	}{
		{"dotdot", map[string]any{"path": "../escape.txt", "content": "x"}, ".."},
		{"absolute", map[string]any{"path": "/etc/x", "content": "x"}, "absolute"},
		{"link in the session", map[string]any{"path": "p.txt", "from_session": "src", "source_path": "link.txt"}, "link"},
		{"dotdot source", map[string]any{"path": "p.txt", "from_session": "src", "source_path": "../x"}, ".."},
		{"both", map[string]any{"path": "p.txt", "from_session": "src", "content": "x"}, "not several"},
		{"url and content", map[string]any{"path": "p.txt", "url": "https://files.example.org/x", "content": "x"}, "not several"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, text, isErr := run(map[string]any{"code": "1", "input_files": []map[string]any{c.file}})
			if !isErr || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, c.want) {
				t.Fatalf("want a RequestError naming %q, got %s %+v", c.want, text, o.Error)
			}
		})
	}
	// Bob has no session "src": alice's files are not his to take.
	var ob out
	res := testenv.Call(t, bob, "execute_python", map[string]any{"code": "1", "input_files": []map[string]any{{"path": "r.csv", "from_session": "src", "source_path": "result.csv"}}}, &ob)
	if !res.IsError || ob.Error == nil || !strings.Contains(ob.Error.Message, "no such session") {
		t.Fatalf("bob read alice's session file: %s %+v", testenv.Text(res), ob.Error)
	}
	// With session_id, input_files are refused (upload_file is the way).
	o, text, isErr = run(map[string]any{"code": "1", "session_id": "src", "input_files": []map[string]any{{"path": "a", "content": "x"}}})
	if !isErr || o.Error == nil || !strings.Contains(o.Error.Message, "upload_file") {
		t.Fatalf("input_files with a session: %s %+v", text, o.Error)
	}
}
