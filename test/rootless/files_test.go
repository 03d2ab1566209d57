package rootless

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// sessionFiles drives every host-side read and write of a live runc
// session's working directory as the user's server: under rootless Podman
// the workspace belongs to a sub-id of the user's (Podman's U), and the
// sandbox may make its files private (ipykernel's kernel.json is 0600).
func sessionFiles(t *testing.T, u *user, base string) {
	data := filepath.Join(u.home, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "in.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(data, "in.csv"), u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	cfg := u.writeConfig(t, "files.toml", base+"\n[volumes.host_roots.data]\npath = \""+data+"\"\nwritable = true\n")
	cs := u.serve(t, cfg)

	run := func(sid, code string) result {
		t.Helper()
		var r result
		res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "session_id": sid}, &r)
		if res.IsError || !r.Success {
			t.Errorf("execute_python in %s %q: %s", sid, code, testenv.Text(res))
		}
		return r
	}
	// tool calls a tool and reports a failure with its error, as found.
	tool := func(name string, args map[string]any, out any) (*mcp.CallToolResult, bool) {
		t.Helper()
		started := time.Now()
		res := testenv.Call(t, cs, name, args, out)
		t.Logf("timing: %s %v", name, time.Since(started).Round(time.Millisecond))
		if res.IsError {
			t.Errorf("%s %v: %s", name, args, testenv.Text(res))
			return res, false
		}
		return res, true
	}

	run("f", "import os\nx = 41\nopen('made.txt', 'w').write('by code')\n"+
		"fd = os.open('private.txt', os.O_WRONLY | os.O_CREAT, 0o600); os.write(fd, b'secret'); os.close(fd)\n"+
		"os.makedirs('priv', mode=0o700)\n"+
		"os.makedirs('closed', mode=0o700); open('closed/in.txt', 'w').write('inside')")

	t.Run("upload", func(t *testing.T) {
		// A new file in a new directory, a file the code wrote: the code
		// reads it, changes it and removes it (the file is the sandbox's to
		// change, as under root).
		for _, p := range []string{"up/in.txt", "made.txt"} {
			if _, ok := tool("upload_file", map[string]any{"session_id": "f", "path": p, "content": "hello " + p}, nil); !ok {
				continue
			}
			code := "p = " + pyQuote(p) + "\nprint(open(p).read()); open(p, 'a').write('!'); print(open(p).read()); os.remove(p); print(os.path.exists(p))"
			if r := run("f", code); r.Stdout != "hello "+p+"\nhello "+p+"!\nFalse\n" {
				t.Errorf("the session's view of uploaded %s: %q %q", p, r.Stdout, r.Stderr)
			}
		}
		run("f", "open('made.txt', 'w').write('by code')")
		// A directory the code made private stays closed to a server that
		// is not root, which says how to open it; opened, it takes files.
		res := testenv.Call(t, cs, "upload_file", map[string]any{"session_id": "f", "path": "priv/in.txt", "content": "x"}, nil)
		if !res.IsError || !strings.Contains(testenv.Text(res), "permission denied") || !strings.Contains(testenv.Text(res), "os.chmod") {
			t.Errorf("upload_file into a directory the code made 0700: want a refusal saying how to open it, got %s", testenv.Text(res))
		}
		run("f", "os.chmod('priv', 0o777)")
		if _, ok := tool("upload_file", map[string]any{"session_id": "f", "path": "priv/in.txt", "content": "x"}, nil); ok {
			if r := run("f", "print(open('priv/in.txt').read())"); r.Stdout != "x\n" {
				t.Errorf("priv/in.txt in the session: %q %q", r.Stdout, r.Stderr)
			}
		}
	})

	t.Run("download", func(t *testing.T) {
		// What the code made private the server reads in the user's
		// namespace (workspace/unshare.go), never through a link.
		for p, want := range map[string]string{"made.txt": "by code", "private.txt": "secret", "closed/in.txt": "inside"} {
			var out struct {
				Content string `json:"content"`
			}
			if _, ok := tool("download_file", map[string]any{"session_id": "f", "path": p}, &out); ok && out.Content != want {
				t.Errorf("download_file %s: %q, want %q", p, out.Content, want)
			}
		}
		run("f", "os.symlink('/etc/shadow', 'shadow')")
		res := testenv.Call(t, cs, "download_file", map[string]any{"session_id": "f", "path": "shadow"}, nil)
		if !res.IsError || !strings.Contains(testenv.Text(res), "link") {
			t.Errorf("download_file of a link the code planted: want a refusal, got %s", testenv.Text(res))
		}
		run("f", "os.remove('shadow')")
	})

	t.Run("host roots", func(t *testing.T) {
		if _, ok := tool("import_file", map[string]any{"session_id": "f", "root": "data", "root_path": "in.csv", "path": "imp/in.csv"}, nil); ok {
			if r := run("f", "print(open('imp/in.csv').read(), end='')"); r.Stdout != "a,b\n1,2\n" {
				t.Errorf("the imported file in the session: %q %q", r.Stdout, r.Stderr)
			}
		}
		for p, want := range map[string]string{"made.txt": "by code", "private.txt": "secret"} {
			if _, ok := tool("export_file", map[string]any{"session_id": "f", "path": p, "root": "data", "root_path": "out-" + p}, nil); ok {
				if b, err := os.ReadFile(filepath.Join(data, "out-"+p)); err != nil || string(b) != want {
					t.Errorf("exported %s: %v %q", p, err, b)
				}
			}
		}
	})

	t.Run("checkpoint and restore", func(t *testing.T) {
		var ck struct {
			Kind      string   `json:"kind"`
			NotWhole  string   `json:"not_whole"`
			FilesLeft []string `json:"files_left_out"`
		}
		if _, ok := tool("checkpoint_session", map[string]any{"session_id": "f"}, &ck); !ok {
			return
		}
		t.Logf("checkpoint: kind %q, not whole %q, left out %q", ck.Kind, ck.NotWhole, ck.FilesLeft)
		// A private file is copied; a directory the code closed is named,
		// not silently missing.
		if len(ck.FilesLeft) != 1 || !strings.HasPrefix(ck.FilesLeft[0], "closed (") {
			t.Errorf("checkpoint_session: files left out %q, want only closed/ with why", ck.FilesLeft)
		}
		run("f", "x = 0\nopen('made.txt', 'w').write('changed')\nos.makedirs('imp/deeper')\nos.remove('private.txt')")
		if _, ok := tool("restore_session", map[string]any{"session_id": "f"}, nil); !ok {
			return
		}
		if r := run("f", "print(x, open('made.txt').read(), open('private.txt').read())"); r.Stdout != "41 by code secret\n" {
			t.Errorf("after restore_session: %q %q", r.Stdout, r.Stderr)
		}
	})

	t.Run("fork", func(t *testing.T) {
		if _, ok := tool("fork_session", map[string]any{"session_id": "f", "new_session_id": "g"}, nil); !ok {
			return
		}
		if r := run("g", "print(x, open('made.txt').read())"); r.Stdout != "41 by code\n" {
			t.Errorf("in the fork: %q %q", r.Stdout, r.Stderr)
		}
		tool("destroy_session", map[string]any{"session_id": "g"}, nil)
	})
	tool("destroy_session", map[string]any{"session_id": "f"}, nil)
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
