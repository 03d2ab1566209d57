package notebook

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

var png = []byte("\x89PNG\r\n\x1a\nfake")

func TestBuild(t *testing.T) {
	start := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		info     Info
		hist     session.History
		kernel   Kernelspec
		langName string
		// cells: each cell's type and its outputs' types, in order
		cells   [][]string
		check   func(t *testing.T, nb map[string]any)
		raw     func(t *testing.T, data []byte) // checks of the notebook's bytes
		version string
	}{
		{
			name: "python with every kind of output",
			info: Info{SessionID: "s1", Language: "python", LanguageName: "Python", LanguageVersion: "3.11.2"},
			hist: session.History{Cells: []session.Cell{
				{Count: 1, Code: "import pandas as pd\nprint('hi')\n1 + 1", Started: start, Duration: 1500 * time.Millisecond, Success: true,
					Stdout: "hi\n", ResultRepr: "2", ResultJSON: "2", Rich: map[string]string{"text/html": "<b>2</b>", "application/json": "{\"a\": 1}"}},
				{Count: 2, Code: "plot()", Success: true, Stderr: "warn\n", Images: []backend.Image{{Name: "image-1.png", MIMEType: "image/png", Data: png}}},
				{Count: 3, Code: "1/0", Error: &backend.ExecError{Name: "ZeroDivisionError", Message: "division by zero", Traceback: []string{"Traceback\n", "ZeroDivisionError\n"}}},
				// The traceback as stderr (a kernel backend's) is the error output only.
				{Count: 4, Code: "1/0", Stderr: "Traceback\nZeroDivisionError\n", Error: &backend.ExecError{Name: "ZeroDivisionError", Traceback: []string{"Traceback", "ZeroDivisionError"}}},
				// Other stderr before an error is kept.
				{Count: 5, Code: "warn(); 1/0", Stderr: "careful\n", Error: &backend.ExecError{Name: "ZeroDivisionError", Traceback: []string{"Traceback"}}},
			}},
			kernel: Kernelspec{"python3", "Python 3 (ipykernel)", "python"}, langName: "python", version: "3.11.2",
			cells: [][]string{{"code", "stream", "execute_result"}, {"code", "stream", "display_data"}, {"code", "error"}, {"code", "error"}, {"code", "stream", "error"}},
			check: func(t *testing.T, nb map[string]any) {
				cells := nb["cells"].([]any)
				first := cells[0].(map[string]any)
				if got := first["source"]; !reflect.DeepEqual(got, []any{"import pandas as pd\n", "print('hi')\n", "1 + 1"}) {
					t.Errorf("source lines: %#v", got)
				}
				res := first["outputs"].([]any)[1].(map[string]any)
				data := res["data"].(map[string]any)
				if res["execution_count"] != 1.0 || !reflect.DeepEqual(data["text/plain"], []any{"2"}) || !reflect.DeepEqual(data["application/json"], map[string]any{"a": 1.0}) || data["text/html"] == nil {
					t.Errorf("execute_result: %#v", res)
				}
				ex := first["metadata"].(map[string]any)["execution"].(map[string]any)
				if ex["iopub.execute_input"] != "2026-12-01T20:00:00Z" || ex["shell.execute_reply"] != "2026-12-01T20:00:01.5Z" {
					t.Errorf("timing: %#v", ex)
				}
				img := cells[1].(map[string]any)["outputs"].([]any)[1].(map[string]any)["data"].(map[string]any)["image/png"].(string)
				if b, err := base64.StdEncoding.DecodeString(img); err != nil || string(b) != string(png) {
					t.Errorf("image/png is not the image in base64: %q", img)
				}
				e := cells[2].(map[string]any)["outputs"].([]any)[0].(map[string]any)
				if e["ename"] != "ZeroDivisionError" || e["evalue"] != "division by zero" || len(e["traceback"].([]any)) != 2 {
					t.Errorf("error output: %#v", e)
				}
			},
		},
		{
			name:   "r: IRkernel's kernelspec, values as execute_result",
			info:   Info{SessionID: "r1", Language: "r", LanguageName: "R", LanguageVersion: "4.2.2"},
			hist:   session.History{Cells: []session.Cell{{Count: 1, Code: "x <- 1:3\nsum(x)", Success: true, ResultRepr: "[1] 6"}}},
			kernel: Kernelspec{"ir", "R", "R"}, langName: "R", version: "4.2.2",
			cells: [][]string{{"code", "execute_result"}},
		},
		{
			name:   "dropped cells are said in a markdown cell; a cell without outputs keeps its code",
			info:   Info{SessionID: "s2", Language: "python", MaxCells: 2, MaxBytes: "4m"},
			hist:   session.History{Dropped: 3, Cells: []session.Cell{{Count: 4, Code: "big()", OutputsLeft: true}, {Count: 5, Code: "pass", Success: true}}},
			kernel: Kernelspec{"python3", "Python 3 (ipykernel)", "python"}, langName: "python",
			cells: [][]string{{"markdown"}, {"code"}, {"code"}},
			check: func(t *testing.T, nb map[string]any) {
				cells := nb["cells"].([]any)
				if _, ok := cells[0].(map[string]any)["outputs"]; ok {
					t.Error("a markdown cell has outputs")
				}
				c := cells[1].(map[string]any)
				if c["execution_count"] != 4.0 || c["metadata"].(map[string]any)["mcp_forge"].(map[string]any)["outputs_left_out"] == nil {
					t.Errorf("cell without outputs: %#v", c)
				}
				if nb["metadata"].(map[string]any)["mcp_forge"].(map[string]any)["cells_dropped"] != 3.0 {
					t.Errorf("metadata: %#v", nb["metadata"])
				}
			},
		},
		{
			name:   "a language without a known Jupyter kernel",
			info:   Info{SessionID: "j", Language: "julia", LanguageName: "Julia"},
			hist:   session.History{Cells: []session.Cell{{Count: 1, Code: "1"}}},
			kernel: Kernelspec{"julia", "Julia", "julia"}, langName: "julia",
			cells: [][]string{{"code"}},
		},
		{
			// A pandas DataFrame's text/html is most of a notebook's bytes:
			// written as Jupyter writes it, not with Go's HTML escapes
			// (\u003c is six bytes for one and unreadable in a diff).
			name: "html and code with <, > and & are written as they are",
			info: Info{SessionID: "h", Language: "python"},
			hist: session.History{Cells: []session.Cell{{Count: 1, Code: "a < b and b > c & d", Success: true, Stdout: "<tag> & </tag>\n",
				ResultRepr: "x", Rich: map[string]string{"text/html": "<table><tr><td>1</td></tr></table>"}}}},
			kernel: Kernelspec{"python3", "Python 3 (ipykernel)", "python"}, langName: "python",
			cells: [][]string{{"code", "stream", "execute_result"}},
			raw: func(t *testing.T, data []byte) {
				for _, want := range []string{`"a < b and b > c & d"`, `"<tag> & </tag>\n"`, `"<table><tr><td>1</td></tr></table>"`} {
					if !strings.Contains(string(data), want) {
						t.Errorf("the notebook lacks %s as written:\n%s", want, data)
					}
				}
			},
		},
		{
			name: "empty history", info: Info{SessionID: "e", Language: "python"},
			kernel: Kernelspec{"python3", "Python 3 (ipykernel)", "python"}, langName: "python", cells: [][]string{},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := Build(c.info, c.hist)
			if err != nil {
				t.Fatal(err)
			}
			var nb map[string]any
			if err := json.Unmarshal(data, &nb); err != nil {
				t.Fatal(err)
			}
			if nb["nbformat"] != 4.0 || nb["nbformat_minor"] != 5.0 {
				t.Errorf("not nbformat 4.5: %v.%v", nb["nbformat"], nb["nbformat_minor"])
			}
			meta := nb["metadata"].(map[string]any)
			ks := meta["kernelspec"].(map[string]any)
			if ks["name"] != c.kernel.Name || ks["display_name"] != c.kernel.DisplayName || ks["language"] != c.kernel.Language {
				t.Errorf("kernelspec %v, want %+v", ks, c.kernel)
			}
			li := meta["language_info"].(map[string]any)
			if li["name"] != c.langName || (c.version != "" && li["version"] != c.version) {
				t.Errorf("language_info %v", li)
			}
			var got [][]string
			ids := map[string]bool{}
			for _, x := range nb["cells"].([]any) {
				cell := x.(map[string]any)
				id, _ := cell["id"].(string)
				if id == "" || ids[id] {
					t.Errorf("cell id %q missing or repeated", id)
				}
				ids[id] = true
				kinds := []string{cell["cell_type"].(string)}
				if cell["cell_type"] == "code" {
					if _, ok := cell["execution_count"]; !ok {
						t.Error("a code cell without execution_count")
					}
					for _, o := range cell["outputs"].([]any) {
						kinds = append(kinds, o.(map[string]any)["output_type"].(string))
					}
				}
				got = append(got, kinds)
			}
			if len(got) == 0 {
				got = [][]string{}
			}
			if !reflect.DeepEqual(got, c.cells) {
				t.Errorf("cells %v, want %v", got, c.cells)
			}
			if c.check != nil {
				c.check(t, nb)
			}
			if c.raw != nil {
				c.raw(t, data)
			}
			validate(t, data)
		})
	}
}

// validate runs nbformat's own validator (Debian's python3-nbformat, which
// make setup installs) on the notebook.
func validate(t *testing.T, data []byte) {
	t.Helper()
	if exec.Command(debianPython, "-c", "import nbformat").Run() != nil {
		t.Log("python3-nbformat is not installed: the notebook is not validated here (make setup installs it; the end-to-end test requires it)")
		return
	}
	f := filepath.Join(t.TempDir(), "n.ipynb")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(debianPython, "-c", "import nbformat,sys; nbformat.validate(nbformat.read(sys.argv[1], as_version=4))", f).CombinedOutput()
	if err != nil {
		t.Fatalf("nbformat rejects the notebook: %v\n%s\n%s", err, out, data)
	}
}

// debianPython is Debian's interpreter, which python3-nbformat installs
// into (a python3 earlier on PATH, pyenv's, lacks it).
const debianPython = "/usr/bin/python3"

// A cell's Size (what it counts against sessions.history_bytes) bounds
// what it takes in the notebook, whatever its output: escapes of control
// characters and invalid UTF-8, one JSON string per line, base64 images.
// Otherwise a history within its bound exports as a notebook several
// times larger, past what an MCP client reads in one message.
func TestSizeBoundsTheNotebook(t *testing.T) {
	const n = 100_000
	img := make([]byte, n)
	for i := range img {
		img[i] = byte(i)
	}
	for name, c := range map[string]session.Cell{
		"control characters": {Stdout: strings.Repeat("\x01", n)},
		"empty lines":        {Stdout: strings.Repeat("\n", n), Stderr: strings.Repeat("\n", n)},
		"quotes":             {Code: strings.Repeat(`"\`, n/2), ResultRepr: strings.Repeat(`"`, n)},
		"invalid utf-8":      {Stdout: strings.Repeat("\xff", n)},
		"line separators":    {Stdout: strings.Repeat("\u2028", n/3)},
		"an image":           {Images: []backend.Image{{Name: "i.png", MIMEType: "image/png", Data: img}}},
		"html":               {ResultRepr: "x", Rich: map[string]string{"text/html": strings.Repeat("<td>\n", n/5)}},
		"error":              {Error: &backend.ExecError{Name: "E", Message: strings.Repeat("\x02", n), Traceback: []string{strings.Repeat("\x1b[0m\n", n/5)}}},
	} {
		t.Run(name, func(t *testing.T) {
			c.Count = 1
			empty, err := Build(Info{SessionID: "s", Language: "python"}, session.History{Cells: []session.Cell{{Count: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			data, err := Build(Info{SessionID: "s", Language: "python"}, session.History{Cells: []session.Cell{c}})
			if err != nil {
				t.Fatal(err)
			}
			// The outputs' own JSON (output_type, name, metadata) is
			// not the content's: a few hundred bytes per output.
			if grown, size := int64(len(data)-len(empty)), c.Size(); grown > size+1024 {
				t.Errorf("the cell takes %d bytes in the notebook, its Size is %d", grown, size)
			}
		})
	}
}
