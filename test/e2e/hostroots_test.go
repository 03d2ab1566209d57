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
	f, err := os.Create(filepath.Join(data, "big.csv"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("a,b\n")
	for i := 0; i < hostCSVRows; i++ {
		w.WriteString(strconv.Itoa(i))
		w.WriteByte(',')
		w.WriteString(strconv.Itoa(2 * i))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
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
