package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

type fileOut = mcpserver.FileOutput

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// decoded is a download's content as bytes.
func decoded(t *testing.T, o fileOut) []byte {
	t.Helper()
	if o.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(o.Content)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []byte(o.Content)
}

// fileRefused checks that a file call was refused with a RequestError naming why.
func fileRefused(t *testing.T, res *mcp.CallToolResult, o fileOut, want string) {
	t.Helper()
	if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, want) {
		t.Errorf("want a refusal mentioning %q, got isError=%v %+v: %s", want, res.IsError, o.Error, testenv.Text(res))
	}
	if o.Content != "" {
		t.Errorf("a refused call returned content")
	}
}

// An agent uploads a CSV, works on it with pandas, gets the result back
// byte-exact; links and '..' planted or asked for are refused.
func TestSessionFiles(t *testing.T) {
	s := testenv.StartServer(t, "")
	run := func(code string) (out, *mcp.CallToolResult) {
		t.Helper()
		var o out
		res := s.Call(t, "execute_python", map[string]any{"code": code, "session_id": "f"}, &o)
		if res.IsError {
			t.Fatalf("%s\n%+v", testenv.Text(res), o)
		}
		return o, res
	}
	call := func(tool string, args map[string]any) (fileOut, *mcp.CallToolResult) {
		t.Helper()
		var o fileOut
		res := s.Call(t, tool, args, &o)
		return o, res
	}
	// Before the session exists there is nowhere to put a file.
	if o, res := call("upload_file", map[string]any{"session_id": "f", "path": "x.csv", "content": "a"}); !res.IsError || o.Error == nil {
		t.Fatalf("upload to a session that does not exist: %s", testenv.Text(res))
	}
	run("import os, hashlib, pandas as pd")

	csv := "a,b\n1,2\n3,4\n10,-5\n"
	t.Run("upload, pandas, download byte-exact", func(t *testing.T) {
		o, res := call("upload_file", map[string]any{"session_id": "f", "path": "data/in.csv", "content": csv})
		if res.IsError || o.Size != int64(len(csv)) || o.Path != "data/in.csv" || o.MIMEType != "text/csv" {
			t.Fatalf("%s %+v", testenv.Text(res), o)
		}
		r, res := run("df = pd.read_csv('data/in.csv')\nos.makedirs('output', exist_ok=True)\n" +
			"df.assign(total=df.a + df.b).to_csv('output/result.csv', index=False)\n" +
			"open('data/in.csv', 'a').write('7,7\\n')\n" + // the code owns uploaded files: it may change them
			"hashlib.sha256(open('output/result.csv', 'rb').read()).hexdigest()")
		want := "a,b,total\n1,2,3\n3,4,7\n10,-5,5\n"
		if r.ResultRepr != `'`+sha([]byte(want))+`'` {
			t.Fatalf("the code saw another file: %s (%s)", r.ResultRepr, testenv.Text(res))
		}
		// The new output file came back with the run, inline.
		var found bool
		for _, c := range res.Content {
			if er, ok := c.(*mcp.EmbeddedResource); ok && strings.HasSuffix(er.Resource.URI, "/files/output/result.csv") {
				found = er.Resource.Text == want && er.Resource.MIMEType == "text/csv"
			}
		}
		if !found || len(r.Files) != 1 || !r.Files[0].Inline || r.Files[0].URI != "mcp://forge/sessions/f/files/output/result.csv" {
			t.Fatalf("output file not attached: %+v\n%s", r.Files, testenv.Text(res))
		}
		d, res := call("download_file", map[string]any{"session_id": "f", "path": "output/result.csv"})
		if res.IsError || string(decoded(t, d)) != want || d.Encoding != "text" {
			t.Fatalf("download: %s %+v", testenv.Text(res), d)
		}
		if d, _ := call("download_file", map[string]any{"session_id": "f", "path": "./data//in.csv"}); string(decoded(t, d)) != csv+"7,7\n" {
			t.Fatalf("the code's change to the uploaded file: %q", d.Content)
		}
		// A later run that writes nothing to output/ returns no files.
		if r, _ := run("1"); len(r.Files) != 0 {
			t.Fatalf("an unchanged file came back again: %+v", r.Files)
		}
	})

	t.Run("binary round trip", func(t *testing.T) {
		data := make([]byte, 70000)
		rand.Read(data)
		data[0], data[1] = 0, 0xff
		if o, res := call("upload_file", map[string]any{"session_id": "f", "path": "bin/blob.dat", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}); res.IsError {
			t.Fatalf("%s %+v", testenv.Text(res), o)
		}
		if r, _ := run("hashlib.sha256(open('bin/blob.dat', 'rb').read()).hexdigest()"); r.ResultRepr != `'`+sha(data)+`'` {
			t.Fatalf("the code read another file: %s", r.ResultRepr)
		}
		d, res := call("download_file", map[string]any{"session_id": "f", "path": "bin/blob.dat"})
		if res.IsError || d.Encoding != "base64" || !bytes.Equal(decoded(t, d), data) {
			t.Fatalf("binary download differs: %s", testenv.Text(res))
		}
		o, res := call("upload_file", map[string]any{"session_id": "f", "path": "bad.bin", "content": "not base64!", "encoding": "base64"})
		fileRefused(t, res, o, "base64")
	})

	t.Run("links, '..', pipes refused", func(t *testing.T) {
		run("os.symlink('/etc/passwd', 'passwd')\nos.symlink('/', 'root')\nos.symlink('data/in.csv', 'inner')\nos.mkfifo('pipe')")
		pipe := "not a regular file"
		if testenv.GVisor() {
			pipe = "no such file" // gVisor keeps a FIFO made in the sandbox inside its Sentry: the host never sees it
		}
		for _, c := range []struct{ tool, path, want string }{
			{"download_file", "passwd", "symbolic link"},
			{"download_file", "root/etc/passwd", "symbolic link"},
			{"download_file", "inner", "symbolic link"},
			{"upload_file", "root/tmp/evil", "symbolic link"},
			{"download_file", "pipe", pipe},
			{"download_file", "data", "directory"},
			{"download_file", "../k/kernel.json", "'..'"},
			{"download_file", "data/../../x", "'..'"},
			{"upload_file", "../escape", "'..'"},
			{"download_file", "/etc/passwd", "absolute"},
			{"upload_file", "/tmp/evil", "absolute"},
			{"download_file", "missing.csv", "no such file"},
		} {
			args := map[string]any{"session_id": "f", "path": c.path}
			if c.tool == "upload_file" {
				args["content"] = "evil"
			}
			o, res := call(c.tool, args)
			fileRefused(t, res, o, c.want)
		}
		// The planted link was replaced by an upload, never written through.
		if o, res := call("upload_file", map[string]any{"session_id": "f", "path": "passwd", "content": "mine"}); res.IsError {
			t.Fatalf("%s %+v", testenv.Text(res), o)
		}
		if b, _ := os.ReadFile("/etc/passwd"); bytes.Equal(b, []byte("mine")) {
			t.Fatal("an upload wrote through a link")
		}
		if r, _ := run("os.path.islink('passwd'), open('passwd').read()"); r.ResultRepr != "(False, 'mine')" {
			t.Fatalf("after the upload: %s", r.ResultRepr)
		}
		var l mcpserver.ListOutput
		s.Call(t, "list_files", map[string]any{"session_id": "f"}, &l)
		types := map[string]string{}
		for _, e := range l.Files {
			types[e.Path] = e.Type
		}
		fifo := "fifo"
		if testenv.GVisor() {
			fifo = "" // the FIFO lives in gVisor's Sentry, not in the host's workspace
		}
		if types["root"] != "symlink" || types["pipe"] != fifo || types["data/in.csv"] != "file" || types["data"] != "directory" {
			t.Fatalf("listing: %+v", types)
		}
		for p := range types {
			if strings.HasPrefix(p, "root/") {
				t.Fatalf("listed through a link: %s", p)
			}
		}
		audit, _ := os.ReadFile(s.AuditLog)
		for _, rule := range []string{`"rule":"file-link"`, `"rule":"file-path"`, `"rule":"file-type"`, `"rule":"file-not-found"`, `"rule":"file-encoding"`} {
			if !bytes.Contains(audit, []byte(rule)) {
				t.Errorf("audit log lacks %s", rule)
			}
		}
	})

	t.Run("2 MB output file as a resource link", func(t *testing.T) {
		r, res := run("big = os.urandom(2 << 20)\nopen('output/big.bin', 'wb').write(big)\nhashlib.sha256(big).hexdigest()")
		var link *mcp.ResourceLink
		for _, c := range res.Content {
			if l, ok := c.(*mcp.ResourceLink); ok {
				link = l
			}
			if er, ok := c.(*mcp.EmbeddedResource); ok && strings.Contains(er.Resource.URI, "big.bin") {
				t.Fatal("a 2 MB file was inlined")
			}
		}
		if link == nil || link.URI != "mcp://forge/sessions/f/files/output/big.bin" || link.Size == nil || *link.Size != 2<<20 {
			t.Fatalf("no resource link: %+v %+v", link, r.Files)
		}
		rr, err := s.Session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: link.URI})
		if err != nil {
			t.Fatal(err)
		}
		if got := rr.Contents[0].Blob; len(got) != 2<<20 || `'`+sha(got)+`'` != r.ResultRepr {
			t.Fatalf("resource read back %d bytes, sha differs", len(got))
		}
		// Through a resource URI too, '..' and links are refused.
		for _, uri := range []string{"mcp://forge/sessions/f/files/../k/kernel.json", "mcp://forge/sessions/f/files/root/etc/passwd", "mcp://forge/sessions/f/files/%2E%2E/x"} {
			if rr, err := s.Session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
				t.Errorf("%s read: %+v", uri, rr.Contents)
			}
		}
	})
}

// Files belong to the session's owner: another connection can neither
// read, list nor write them; sizes over the limit are refused.
func TestSessionFilesOwnership(t *testing.T) {
	p := testenv.NewInProcess(t, func(c *config.Config) { c.Volumes.MaxFileSize = 1 << 20 })
	alice, bob := p.Connect(t), p.Connect(t)
	if res := testenv.Call(t, alice, "execute_python", map[string]any{"code": "1", "session_id": "mine"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	var o fileOut
	if res := testenv.Call(t, alice, "upload_file", map[string]any{"session_id": "mine", "path": "secret.txt", "content": "s3cret"}, &o); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"download_file", map[string]any{"session_id": "mine", "path": "secret.txt"}},
		{"list_files", map[string]any{"session_id": "mine"}},
		{"upload_file", map[string]any{"session_id": "mine", "path": "secret.txt", "content": "overwritten"}},
	} {
		res := testenv.Call(t, bob, c.tool, c.args, nil)
		if !res.IsError || strings.Contains(testenv.Text(res), "s3cret") || strings.Contains(testenv.Text(res), "secret.txt (") {
			t.Errorf("%s by another connection: %s", c.tool, testenv.Text(res))
		}
	}
	if _, err := bob.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/mine/files/secret.txt"}); err == nil {
		t.Error("another connection read the file as a resource")
	}
	testenv.Call(t, alice, "download_file", map[string]any{"session_id": "mine", "path": "secret.txt"}, &o)
	if o.Content != "s3cret" {
		t.Fatalf("the owner's file changed: %+v", o)
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, 1<<20+1))
	o = fileOut{}
	res := testenv.Call(t, alice, "upload_file", map[string]any{"session_id": "mine", "path": "big.bin", "content": big, "encoding": "base64"}, &o)
	fileRefused(t, res, o, "volumes.max_file_size")
}

// Uploads count against the session's quota, which the kernel enforces
// (each workspace is its own filesystem): what does not fit is refused
// before anything is written, and the session's files stay intact.
func TestSessionFilesQuota(t *testing.T) {
	testenv.Parallel(t)
	s := testenv.StartServer(t, "[volumes]\nsession_quota = \"20m\"\n")
	if res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "q"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	chunk := base64.StdEncoding.EncodeToString(make([]byte, 9<<20))
	var o fileOut
	for _, name := range []string{"a.bin", "b.bin"} {
		if res := s.Call(t, "upload_file", map[string]any{"session_id": "q", "path": name, "content": chunk, "encoding": "base64"}, &o); res.IsError {
			t.Fatalf("9 MB into a 20 MB workspace: %s", testenv.Text(res))
		}
	}
	o = fileOut{}
	res := s.Call(t, "upload_file", map[string]any{"session_id": "q", "path": "c.bin", "content": chunk, "encoding": "base64"}, &o)
	fileRefused(t, res, o, "volumes.session_quota")
	var l mcpserver.ListOutput
	s.Call(t, "list_files", map[string]any{"session_id": "q"}, &l)
	for _, e := range l.Files {
		if (e.Path != "a.bin" && e.Path != "b.bin") || e.Size != 9<<20 {
			t.Errorf("after the refused upload: %+v", e)
		}
	}
	audit, _ := os.ReadFile(s.AuditLog)
	if !bytes.Contains(audit, []byte(`"rule":"file-quota"`)) {
		t.Error("audit log lacks file-quota")
	}
}

// Every file tool refuses the same hostile paths by the same rule on
// every runtime: '..' (alone, repeated, after a directory), absolute
// paths, and links the code planted (to the workspace's parent, to /, to
// /etc and a file in it), for upload_file, download_file, list_files,
// resources/read and input_files (path, and source_path from a session).
// On Kubernetes list_files once joined the path onto the working directory
// unchecked and listed the pod's whole workspace, kernel.json included.
func TestSessionFilesHostilePaths(t *testing.T) {
	s := testenv.StartServer(t, "")
	const sid = "h"
	if res := s.Call(t, "execute_python", map[string]any{"session_id": sid, "code": "import os\nos.makedirs('output', exist_ok=True)\n" +
		"os.symlink('..', 'up')\nos.symlink('/', 'root')\nos.symlink('/etc', 'etcdir')\nos.symlink('/etc/passwd', 'pw')\n" +
		"open('output/ok.txt', 'w').write('ok')"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	seen := len(auditEntries(t, s.AuditLog))
	// refusedBy is the rule of the one refusal tool audited since the last call.
	refusedBy := func(t *testing.T, tool string) string {
		t.Helper()
		all := auditEntries(t, s.AuditLog)
		var rules []string
		for _, e := range all[seen:] {
			if e.Event == "request.refused" && e.Details["tool"] == tool {
				r, _ := e.Details["rule"].(string)
				rules = append(rules, r)
			}
		}
		seen = len(all)
		if len(rules) != 1 {
			t.Errorf("want one audited refusal by %s, got rules %q", tool, rules)
			return ""
		}
		return rules[0]
	}
	const (
		pathRule = "file-path"
		linkRule = "file-link"
	)
	cases := []struct{ path, rule string }{
		{"..", pathRule},
		{"../..", pathRule},
		{"output/../..", pathRule},
		{"output/../../k", pathRule},
		{"../k/kernel.json", pathRule},
		{"/etc", pathRule},
		{"/etc/passwd", pathRule},
		{"/", pathRule},
		{"/forge/ws", pathRule},
		{"up", linkRule},
		{"up/k", linkRule},
		{"root/etc", linkRule},
		{"etcdir", linkRule},
		{"etcdir/passwd", linkRule},
		{"pw", linkRule},
	}
	for _, c := range cases {
		t.Run("list_files "+c.path, func(t *testing.T) {
			var l mcpserver.ListOutput
			res := s.Call(t, "list_files", map[string]any{"session_id": sid, "path": c.path}, &l)
			if !res.IsError || len(l.Files) != 0 {
				t.Fatalf("listed %d entries: %s", len(l.Files), testenv.Text(res))
			}
			if got := refusedBy(t, "list_files"); got != c.rule {
				t.Errorf("refused by %q, want %q", got, c.rule)
			}
		})
		t.Run("download_file "+c.path, func(t *testing.T) {
			var o fileOut
			res := s.Call(t, "download_file", map[string]any{"session_id": sid, "path": c.path}, &o)
			fileRefused(t, res, o, "")
			if got := refusedBy(t, "download_file"); got != c.rule {
				t.Errorf("refused by %q, want %q", got, c.rule)
			}
		})
		t.Run("resources/read "+c.path, func(t *testing.T) {
			uri := "mcp://forge/sessions/" + sid + "/files/" + c.path
			if rr, err := s.Session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
				t.Fatalf("read %s: %d contents", uri, len(rr.Contents))
			}
			if got := refusedBy(t, "resources/read"); got != c.rule {
				t.Errorf("refused by %q, want %q", got, c.rule)
			}
		})
		t.Run("input_files source_path "+c.path, func(t *testing.T) {
			var o out
			res := s.Call(t, "execute_python", map[string]any{"code": "1", "input_files": []map[string]any{
				{"path": "in.txt", "from_session": sid, "source_path": c.path}}}, &o)
			if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" {
				t.Fatalf("not refused: %s", testenv.Text(res))
			}
			if got := refusedBy(t, "execute_python"); got != c.rule {
				t.Errorf("refused by %q, want %q", got, c.rule)
			}
		})
		// An upload replaces a link at its own path (never writing through
		// it): a link on the way to it is what is refused.
		up := c.path
		if c.rule == linkRule {
			up += "/x"
		}
		t.Run("upload_file "+up, func(t *testing.T) {
			var o fileOut
			res := s.Call(t, "upload_file", map[string]any{"session_id": sid, "path": up, "content": "evil"}, &o)
			fileRefused(t, res, o, "")
			if got := refusedBy(t, "upload_file"); got != c.rule {
				t.Errorf("refused by %q, want %q", got, c.rule)
			}
		})
	}
	for _, p := range []string{"..", "/etc/x", "output/../../x"} {
		t.Run("input_files path "+p, func(t *testing.T) {
			var o out
			res := s.Call(t, "execute_python", map[string]any{"code": "1", "input_files": []map[string]any{{"path": p, "content": "x"}}}, &o)
			if !res.IsError || o.Error == nil {
				t.Fatalf("not refused: %s", testenv.Text(res))
			}
			if got := refusedBy(t, "execute_python"); got != pathRule {
				t.Errorf("refused by %q, want %q", got, pathRule)
			}
		})
	}
	// The working directory itself lists, and holds nothing of the kernel's.
	var l mcpserver.ListOutput
	if res := s.Call(t, "list_files", map[string]any{"session_id": sid}, &l); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	paths := map[string]string{}
	for _, e := range l.Files {
		paths[e.Path] = e.Type
		if strings.Contains(e.Path, "kernel.json") || strings.HasPrefix(e.Path, "..") {
			t.Errorf("the listing reaches beyond the working directory: %s", e.Path)
		}
	}
	if paths["output/ok.txt"] != "file" || paths["up"] != "symlink" {
		t.Errorf("listing of the working directory: %v", paths)
	}
	// The planted links were never written through, nor replaced.
	if b, _ := os.ReadFile("/etc/passwd"); bytes.Contains(b, []byte("evil")) {
		t.Fatal("an upload wrote through a link")
	}
	var r out
	s.Call(t, "execute_python", map[string]any{"session_id": sid, "code": "[os.readlink(p) for p in ('up', 'root', 'etcdir', 'pw')]"}, &r)
	if r.ResultRepr != "['..', '/', '/etc', '/etc/passwd']" {
		t.Errorf("the planted links changed: %s", r.ResultRepr)
	}
}
