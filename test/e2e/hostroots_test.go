package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// hostCSVRows makes a CSV of about 200 MB: "i,2i" per row.
const hostCSVRows = 12_500_000

// A CSV of about 200 MB in a host root is analysed with pandas in a
// session and a result written back to a writable root, with under 10 KB
// crossing MCP in all (the transport's bytes counted); hostile paths and a
// read-only root are refused, each audited with its rule.
func TestHostRootsWithoutTheModel(t *testing.T) {
	testenv.Parallel(t)
	data, out := t.TempDir(), t.TempDir()
	writeCSV(t, filepath.Join(data, "big.csv"), hostCSVRows)
	st, _ := os.Stat(filepath.Join(data, "big.csv"))
	// What another process of the machine may plant in a root.
	os.Symlink("/etc/passwd", filepath.Join(data, "passwd-link"))
	syscall.Mkfifo(filepath.Join(data, "fifo"), 0o644)
	os.Mkdir(filepath.Join(data, "sub"), 0o755)
	os.Symlink("/etc", filepath.Join(data, "sub", "etc"))

	p := testenv.NewInProcess(t, func(c *config.Config) {
		c.Volumes.HostRoots = map[string]config.HostRoot{"data": {Path: data}, "out": {Path: out, Writable: true}}
	})
	// As serve names a stdio client: roots without tenants are the local
	// client's.
	p.Forge.MCP.SetIdentity(func(mcp.Request) (string, error) { return mcpserver.StdioClient, nil })
	var n atomic.Int64
	cs := p.ConnectCounting(t, &n)
	call := func(tool string, args map[string]any) (string, bool) {
		var o map[string]any
		res := testenv.Call(t, cs, tool, args, &o)
		return testenv.Text(res), res.IsError
	}
	if text, isErr := call("execute_python", map[string]any{"code": "import pandas", "session_id": "big"}); isErr {
		t.Fatal(text)
	}
	if text, isErr := call("list_host_files", map[string]any{}); isErr || !strings.Contains(text, "data (writable: false)") || !strings.Contains(text, "out (writable: true)") {
		t.Fatalf("roots: %s", text)
	}
	if text, isErr := call("list_host_files", map[string]any{"root": "data"}); isErr || !strings.Contains(text, fmt.Sprintf("big.csv (%d bytes)", st.Size())) {
		t.Fatalf("data's files: %s", text)
	}
	if text, isErr := call("import_file", map[string]any{"session_id": "big", "root": "data", "root_path": "big.csv", "path": "in/big.csv"}); isErr {
		t.Fatalf("import: %s", text)
	}
	code := `import pandas as pd, os
rows, total = 0, 0
for chunk in pd.read_csv("in/big.csv", chunksize=2_000_000):
    rows += len(chunk); total += int(chunk["b"].sum())
os.makedirs("output", exist_ok=True)
pd.DataFrame({"rows": [rows], "total": [total]}).to_csv("output/summary.csv", index=False)
print(rows, total)`
	text, isErr := call("execute_python", map[string]any{"code": code, "session_id": "big", "timeout": 300})
	want := fmt.Sprintf("%d %d", hostCSVRows, int64(hostCSVRows)*(hostCSVRows-1))
	if isErr || !strings.Contains(text, want) {
		t.Fatalf("pandas: %s (want %s)", text, want)
	}
	if text, isErr := call("export_file", map[string]any{"session_id": "big", "path": "output/summary.csv", "root": "out", "root_path": "results/summary.csv"}); isErr {
		t.Fatalf("export: %s", text)
	}
	got, err := os.ReadFile(filepath.Join(out, "results", "summary.csv"))
	if err != nil || string(got) != fmt.Sprintf("rows,total\n%d,%d\n", hostCSVRows, int64(hostCSVRows)*(hostCSVRows-1)) {
		t.Fatalf("the result on the user's disk: %q %v", got, err)
	}
	if total := n.Load(); total > 10<<10 {
		t.Errorf("%d bytes crossed MCP for a %d-byte file, want under 10 KB", total, st.Size())
	} else {
		t.Logf("%d bytes crossed MCP for a %d-byte file and its result", total, st.Size())
	}

	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want, rule string
	}{
		{"dot-dot", "import_file", map[string]any{"root_path": "../" + filepath.Base(out) + "/results/summary.csv"}, "'..' would leave", files.RuleFilePath},
		{"absolute", "import_file", map[string]any{"root_path": "/etc/passwd"}, "absolute", files.RuleFilePath},
		{"planted link", "import_file", map[string]any{"root_path": "passwd-link"}, "symbolic link", files.RuleFileLink},
		{"link on the way", "import_file", map[string]any{"root_path": "sub/etc/passwd"}, "symbolic link", files.RuleFileLink},
		{"fifo", "import_file", map[string]any{"root_path": "fifo"}, "is a fifo", files.RuleFileType},
		{"newline", "import_file", map[string]any{"root_path": "big.csv\nx"}, "control character", files.RuleFilePath},
		{"unknown root", "import_file", map[string]any{"root": "home", "root_path": "x"}, "no such host root", files.RuleHostRoot},
		{"read-only root", "export_file", map[string]any{"root": "data", "path": "output/summary.csv"}, "read-only", files.RuleHostRootReadOnly},
		{"export dot-dot", "export_file", map[string]any{"root": "out", "path": "output/summary.csv", "root_path": "../escape.csv"}, "'..' would leave", files.RuleFilePath},
	} {
		args := map[string]any{"session_id": "big", "root": "data"}
		for k, v := range tc.args {
			args[k] = v
		}
		text, isErr := call(tc.tool, args)
		if !isErr || !strings.Contains(text, tc.want) {
			t.Errorf("%s: %s, want a refusal saying %q", tc.name, text, tc.want)
		}
	}
	refused := map[string]int{}
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		if e.Event == engine.EventRefused {
			refused[fmt.Sprint(e.Details["rule"])]++
		}
	}
	for rule, n := range map[string]int{files.RuleFilePath: 4, files.RuleFileLink: 2, files.RuleFileType: 1, files.RuleHostRoot: 1, files.RuleHostRootReadOnly: 1} {
		if refused[rule] != n {
			t.Errorf("%d refusals audited by %s, want %d (all: %v)", refused[rule], rule, n, refused)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(out), "escape.csv")); err == nil {
		t.Error("export_file wrote outside its root")
	}
	reads, writes := 0, 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		switch e.Event {
		case files.EventHostRead:
			reads++
		case files.EventHostWrite:
			writes++
		}
	}
	if reads != 1 || writes != 1 {
		t.Errorf("audit: %d host reads and %d writes, want 1 and 1", reads, writes)
	}
}

// hostMountRows makes a CSV of about 20 MB for the mounted-root test: the
// 200 MB figure is TestHostRootsWithoutTheModel's; here what counts is
// that the bytes are read in place.
const hostMountRows = 1_500_000

// Host roots mounted read-only into a stateless run and a session
// (host_roots): the code reads a CSV where it lies, with under 10 KB
// crossing MCP; writes fail with EROFS, a writable root included; links
// planted in the root resolve inside the sandbox, never to the host's
// files; a session keeps the roots it started with and refuses others; a
// root replaced by a link after the start, an unknown root and roots on a
// later call are refused, each audited with its rule.
func TestHostRootsMounted(t *testing.T) {
	testenv.Parallel(t)
	top := t.TempDir()
	data, out, moving, outside := filepath.Join(top, "data"), filepath.Join(top, "out"), filepath.Join(top, "moving"), filepath.Join(top, "outside")
	for _, d := range []string{top, data, out, moving, outside} {
		os.MkdirAll(d, 0o755)
		os.Chmod(d, 0o755) // the sandbox reads what others may read
	}
	// The roots are writable by anyone: only the read-only mount stops
	// the sandbox's writes (EROFS, not EACCES).
	os.Chmod(data, 0o777)
	os.Chmod(out, 0o777)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("host-secret-4711"), 0o644)
	writeCSV(t, filepath.Join(data, "big.csv"), hostMountRows)
	os.Chmod(filepath.Join(data, "big.csv"), 0o666)
	// Links another process plants: relative out of the root, absolute to
	// a host file.
	os.Symlink("../outside/secret.txt", filepath.Join(data, "up"))
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(data, "abs"))

	p := testenv.NewInProcess(t, func(c *config.Config) {
		c.Volumes.HostRoots = map[string]config.HostRoot{"data": {Path: data}, "out": {Path: out, Writable: true}, "moving": {Path: moving}}
	})
	p.Forge.MCP.SetIdentity(func(mcp.Request) (string, error) { return mcpserver.StdioClient, nil })
	var n atomic.Int64
	cs := p.ConnectCounting(t, &n)
	call := func(args map[string]any) (string, map[string]any, bool) {
		var o map[string]any
		res := testenv.Call(t, cs, "execute_python", args, &o)
		return testenv.Text(res), o, res.IsError
	}
	read := `import pandas as pd
total = sum(int(c["b"].sum()) for c in pd.read_csv("/mnt/data/big.csv", chunksize=500_000))
print("total", total)`
	want := fmt.Sprintf("total %d", int64(hostMountRows)*(hostMountRows-1))
	probe := `import errno, os
for p in ["/mnt/data/new.txt", "/mnt/out/new.txt", "/mnt/data/big.csv"]:
    try:
        open(p, "a").close(); print("WROTE", p)
    except OSError as e:
        print("refused", p, errno.errorcode[e.errno])
for p in ["/mnt/data/up", "/mnt/data/abs"]:
    try:
        print("READ", p, open(p).read())
    except OSError as e:
        print("absent", p, errno.errorcode[e.errno])
print(sorted(os.listdir("/mnt")))`

	// A stateless run.
	text, o, isErr := call(map[string]any{"code": read + "\n" + probe, "host_roots": []string{"data", "out"}, "timeout": 120})
	if isErr || !strings.Contains(text, want) {
		t.Fatalf("stateless run over a mounted root: %s (want %s)", text, want)
	}
	for _, s := range []string{"refused /mnt/data/new.txt EROFS", "refused /mnt/out/new.txt EROFS", "refused /mnt/data/big.csv EROFS", "absent /mnt/data/up ENOENT", "absent /mnt/data/abs ENOENT", "['data', 'out']"} {
		if !strings.Contains(text, s) {
			t.Errorf("stateless run: want %q in %s", s, text)
		}
	}
	if strings.Contains(text, "host-secret") || strings.Contains(text, "WROTE") {
		t.Errorf("the sandbox read a host file through a planted link or wrote into a root: %s", text)
	}
	if !strings.Contains(fmt.Sprint(o["notices"]), "host roots mounted read-only: data at /mnt/data, out at /mnt/out") {
		t.Errorf("notices: %v", o["notices"])
	}
	if _, err := os.Stat(filepath.Join(out, "new.txt")); err == nil {
		t.Error("a file appeared in the writable root")
	}

	// A session takes its roots on its first call and keeps them.
	if text, _, isErr := call(map[string]any{"code": "import os; print(os.listdir('/mnt'))", "session_id": "m", "host_roots": []string{"data"}}); isErr || !strings.Contains(text, "['data']") {
		t.Fatalf("session's first call: %s", text)
	}
	if text, _, isErr := call(map[string]any{"code": read, "session_id": "m", "timeout": 120}); isErr || !strings.Contains(text, want) {
		t.Fatalf("session's second call: %s", text)
	}
	if total := n.Load(); total > 10<<10 {
		t.Errorf("%d bytes crossed MCP, want under 10 KB", total)
	} else {
		t.Logf("%d bytes crossed MCP for three runs over a %d-row CSV", total, hostMountRows)
	}

	// The root "moving" is replaced by a link after the server checked it.
	os.Rename(moving, moving+".old")
	os.Symlink(outside, moving)
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
		rule string
	}{
		{"other roots later", map[string]any{"session_id": "m", "host_roots": []string{"out"}}, "was started with host roots data", "host-root-session"},
		{"unknown root", map[string]any{"host_roots": []string{"home"}}, "no such host root", files.RuleHostRoot},
		{"replaced root", map[string]any{"host_roots": []string{"moving"}}, "is no longer a directory", "host-root-changed"},
	} {
		args := map[string]any{"code": "print(open('/mnt/moving/secret.txt').read())"}
		for k, v := range tc.args {
			args[k] = v
		}
		if text, _, isErr := call(args); !isErr || !strings.Contains(text, tc.want) || strings.Contains(text, "host-secret") {
			t.Errorf("%s: %s, want a refusal saying %q", tc.name, text, tc.want)
		}
	}
	refused, mounts := map[string]int{}, 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		switch e.Event {
		case engine.EventRefused:
			refused[fmt.Sprint(e.Details["rule"])]++
		case "files.host_mount":
			mounts++
		}
	}
	for rule, n := range map[string]int{"host-root-session": 1, files.RuleHostRoot: 1, "host-root-changed": 1} {
		if refused[rule] != n {
			t.Errorf("%d refusals audited by %s, want %d (all: %v)", refused[rule], rule, n, refused)
		}
	}
	if mounts != 2 {
		t.Errorf("%d files.host_mount audit lines, want 2 (the stateless run, the session)", mounts)
	}
}

// writeCSV writes "a,b" and rows rows of "i,2i" to path.
func writeCSV(t *testing.T, path string, rows int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("a,b\n")
	for i := 0; i < rows; i++ {
		w.WriteString(strconv.Itoa(i))
		w.WriteByte(',')
		w.WriteString(strconv.Itoa(2 * i))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}
