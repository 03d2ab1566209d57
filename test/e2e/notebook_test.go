package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Sessions as work products (issue 25): forks that diverge, and a
// session's history exported as a notebook that nbformat accepts and that
// re-runs to the same outputs; another connection sees none of it.

type forkOut = mcpserver.ForkOutput
type notebookOut = mcpserver.NotebookOutput

// run executes code in session sid and fails the test on a tool error.
func run(t *testing.T, cs *mcp.ClientSession, lang, sid, code string) out {
	t.Helper()
	var o out
	if res := testenv.Call(t, cs, "execute_"+lang, map[string]any{"code": code, "session_id": sid}, &o); res.IsError && o.Error != nil && o.Error.Type == "RequestError" {
		t.Fatalf("%s\n%+v", testenv.Text(res), o)
	}
	return o
}

func fork(t *testing.T, cs *mcp.ClientSession, from, to string) (forkOut, *mcp.CallToolResult) {
	t.Helper()
	var o forkOut
	args := map[string]any{"session_id": from}
	if to != "" {
		args["new_session_id"] = to
	}
	res := testenv.Call(t, cs, "fork_session", args, &o)
	return o, res
}

// A fork has the source's variables and files, not its open handles; then
// each changes without the other seeing it. Another connection cannot
// fork the session, and a fork cannot take an id in use.
func TestForkDiverges(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	alice, bob := p.Connect(t), p.Connect(t)
	for _, c := range []struct {
		lang, setup, handle, get, set5, set99, writeFork string
		copied                                           []string
		want10, want5, want99                            string
	}{
		{lang: "python",
			setup:  "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nn = 10\nwith open('data.txt', 'w') as f:\n    f.write('source')\nfh = open('h.txt', 'w')",
			handle: "fh", get: "n + int(df.a.sum())", set5: "n = 5", set99: "n = 99\ndf['a'] = 0",
			writeFork: "with open('data.txt', 'w') as f:\n    f.write('fork')",
			copied:    []string{"df", "n"}, want10: "16", want5: "11", want99: "99"},
		{lang: "r",
			setup:  "d <- data.frame(x = 1:3)\nn <- 10\nwriteLines('source', 'data.txt')\ncon <- file('c.txt', 'w')",
			handle: "con", get: "n + sum(d$x)", set5: "n <- 5", set99: "n <- 99\nd$x <- 0L",
			writeFork: "writeLines('fork', 'data.txt')",
			copied:    []string{"d", "n"}, want10: "[1] 16", want5: "[1] 11", want99: "[1] 99"},
	} {
		t.Run(c.lang, func(t *testing.T) {
			src, dst := c.lang+"-src", c.lang+"-fork"
			run(t, alice, c.lang, src, c.setup)
			if o, res := fork(t, bob, src, dst); !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "no such session") {
				t.Fatalf("another connection forked the session: %s %+v", testenv.Text(res), o)
			}
			o, res := fork(t, alice, src, dst)
			if res.IsError {
				t.Fatalf("fork: %s", testenv.Text(res))
			}
			for _, v := range c.copied {
				if !strings.Contains(","+strings.Join(o.Saved, ",")+",", ","+v+",") {
					t.Errorf("%s not copied: %+v", v, o)
				}
			}
			if o.Skipped[c.handle] == "" || !strings.Contains(testenv.Text(res), c.handle) {
				t.Errorf("the open handle %s is not listed as not copied: %+v", c.handle, o)
			}
			if o.SessionID != dst || o.Source != src || o.ForkTime <= 0 || o.Bytes <= 0 {
				t.Errorf("fork result: %+v", o)
			}
			if got := run(t, alice, c.lang, dst, c.get).ResultRepr; got != c.want10 {
				t.Fatalf("in the fork %s = %q, want %q", c.get, got, c.want10)
			}
			file := func(sid string) string {
				var d fileOut
				if res := testenv.Call(t, alice, "download_file", map[string]any{"session_id": sid, "path": "data.txt"}, &d); res.IsError {
					t.Fatalf("download from %s: %s", sid, testenv.Text(res))
				}
				return strings.TrimSpace(d.Content)
			}
			if got := file(dst); got != "source" {
				t.Fatalf("the fork's working directory: data.txt = %q", got)
			}
			// Diverge: each one's change is invisible in the other.
			run(t, alice, c.lang, dst, c.set99)
			run(t, alice, c.lang, dst, c.writeFork)
			if got := run(t, alice, c.lang, src, c.get).ResultRepr; got != c.want10 {
				t.Fatalf("the fork's change reached the source: %s = %q", c.get, got)
			}
			if got := file(src); got != "source" {
				t.Fatalf("the fork's file reached the source: %q", got)
			}
			run(t, alice, c.lang, src, c.set5)
			if got := run(t, alice, c.lang, dst, c.get).ResultRepr; got != c.want99 {
				t.Fatalf("the source's change reached the fork: %s = %q, want %q", c.get, got, c.want99)
			}
			if got := run(t, alice, c.lang, src, c.get).ResultRepr; got != c.want5 {
				t.Fatalf("source after its change: %q", got)
			}
			// A fork cannot take a session's id, nor bob see alice's fork.
			if o, res := fork(t, alice, src, dst); !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "taken") {
				t.Fatalf("a fork into a live session's id: %s", testenv.Text(res))
			}
			if res := testenv.Call(t, bob, "execute_"+c.lang, map[string]any{"code": c.get, "session_id": dst}, nil); !res.IsError {
				// bob's own new session of that id has no n: an error.
				t.Fatalf("bob reached alice's fork: %s", testenv.Text(res))
			}
			// A fork without a given id gets one of its own.
			auto, res := fork(t, alice, src, "")
			if res.IsError || !strings.HasPrefix(auto.SessionID, src+"-fork-") {
				t.Fatalf("fork without new_session_id: %s %+v", testenv.Text(res), auto)
			}
			for _, sid := range []string{src, dst, auto.SessionID} {
				if res := testenv.Call(t, alice, "destroy_session", map[string]any{"session_id": sid}, nil); res.IsError {
					t.Fatal(testenv.Text(res))
				}
			}
		})
	}
}

// ipynb is the part of a notebook the test compares.
type ipynb struct {
	Cells []struct {
		CellType string   `json:"cell_type"`
		Source   []string `json:"source"`
		Outputs  []struct {
			OutputType string         `json:"output_type"`
			Name       string         `json:"name"`
			Text       []string       `json:"text"`
			Data       map[string]any `json:"data"`
			EName      string         `json:"ename"`
		} `json:"outputs"`
	} `json:"cells"`
	Metadata struct {
		Kernelspec struct {
			Name     string `json:"name"`
			Language string `json:"language"`
		} `json:"kernelspec"`
		LanguageInfo struct {
			Name string `json:"name"`
		} `json:"language_info"`
	} `json:"metadata"`
}

// outputs summarises a cell's outputs for comparison: streams' text,
// results' text/plain, which image types, error names.
func outputs(c struct {
	OutputType string         `json:"output_type"`
	Name       string         `json:"name"`
	Text       []string       `json:"text"`
	Data       map[string]any `json:"data"`
	EName      string         `json:"ename"`
}) string {
	switch c.OutputType {
	case "stream":
		return c.Name + ":" + strings.Join(c.Text, "")
	case "execute_result":
		b, _ := json.Marshal(c.Data["text/plain"])
		return "result:" + string(b)
	case "display_data":
		for k := range c.Data {
			if strings.HasPrefix(k, "image/") {
				return "image:" + k
			}
		}
		return "display"
	case "error":
		return "error:" + c.EName
	}
	return c.OutputType
}

// nbformatValidate runs nbformat's validator (Debian's python3-nbformat,
// installed by make setup) on the notebook.
func nbformatValidate(t *testing.T, data []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "export.ipynb")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", "import nbformat,sys; nbformat.validate(nbformat.read(sys.argv[1], as_version=4)); print('valid')", f)
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "valid" {
		t.Fatalf("nbformat does not accept the exported notebook (python3-nbformat is installed by make setup): %v\n%s", err, out)
	}
}

// A session's cells come back as an nbformat 4.5 notebook with the
// kernel's kernelspec, its outputs the notebook's own (streams, results,
// embedded images, errors); nbformat validates it; its code re-run in a
// fresh session gives the same outputs. Another connection reads neither
// the notebook nor the history.
func TestExportNotebook(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	alice, bob := p.Connect(t), p.Connect(t)
	for _, c := range []struct {
		lang, kernel string
		cells        []string
		want         [][]string // each code cell's outputs (outputs())
	}{
		{"python", "python3", []string{
			"print('hello')",
			"x = 6 * 7\nx",
			"import sys\nprint('warn', file=sys.stderr)",
			"import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()",
			"x / 0",
		}, [][]string{{"stdout:hello\n"}, {`result:["42"]`}, {"stderr:warn\n"}, {"image:image/png"}, {"error:ZeroDivisionError"}}},
		{"r", "ir", []string{
			"cat('hello\\n')",
			"x <- 6 * 7\nx",
			"message('warn')",
			"plot(1:10)",
			"stop('boom')",
		}, [][]string{{"stdout:hello\n"}, {`result:["[1] 42"]`}, {"stderr:warn\n\n"}, {"image:image/png"}, {"error:"}}},
	} {
		t.Run(c.lang, func(t *testing.T) {
			sid := c.lang + "-nb"
			for _, code := range c.cells {
				run(t, alice, c.lang, sid, code)
			}
			var o notebookOut
			res := testenv.Call(t, alice, "export_notebook", map[string]any{"session_id": sid}, &o)
			if res.IsError || o.Notebook == "" || o.Cells != len(c.cells) || o.MIMEType != "application/x-ipynb+json" {
				t.Fatalf("export: %s %+v", testenv.Text(res), o.Error)
			}
			nbformatValidate(t, []byte(o.Notebook))
			var nb ipynb
			if err := json.Unmarshal([]byte(o.Notebook), &nb); err != nil {
				t.Fatal(err)
			}
			if nb.Metadata.Kernelspec.Name != c.kernel || len(nb.Cells) != len(c.cells) {
				t.Fatalf("kernelspec %+v, %d cells", nb.Metadata.Kernelspec, len(nb.Cells))
			}
			got := func(nb ipynb) [][]string {
				var all [][]string
				for _, cell := range nb.Cells {
					var outs []string
					for _, x := range cell.Outputs {
						s := outputs(x)
						if c.lang == "r" && strings.HasPrefix(s, "error:") {
							s = "error:" // IRkernel names every error the same: compare that there is one
						}
						outs = append(outs, s)
					}
					all = append(all, outs)
				}
				return all
			}
			if g := got(nb); !sameOutputs(g, c.want) {
				t.Fatalf("outputs %q, want %q", g, c.want)
			}
			for i, cell := range nb.Cells {
				if strings.Join(cell.Source, "") != c.cells[i] {
					t.Errorf("cell %d source %q, want %q", i, strings.Join(cell.Source, ""), c.cells[i])
				}
			}
			// The same notebook as a resource, and the history behind it.
			rr, err := alice.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: o.URI})
			if err != nil || len(rr.Contents) != 1 || rr.Contents[0].MIMEType != "application/x-ipynb+json" {
				t.Fatalf("notebook resource: %v %+v", err, rr)
			}
			var again ipynb
			if err := json.Unmarshal([]byte(rr.Contents[0].Text), &again); err != nil || len(again.Cells) != len(c.cells) {
				t.Fatalf("notebook resource: %v, %d cells", err, len(again.Cells))
			}
			hist, err := alice.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/" + sid + "/history"})
			if err != nil {
				t.Fatal(err)
			}
			var h struct {
				Cells []mcpserver.HistoryCell `json:"cells"`
			}
			if err := json.Unmarshal([]byte(hist.Contents[0].Text), &h); err != nil || len(h.Cells) != len(c.cells) || h.Cells[1].Code != c.cells[1] || len(h.Cells[3].Images) != 1 || h.Cells[4].Error == nil {
				t.Fatalf("history resource: %v %s", err, hist.Contents[0].Text[:min(len(hist.Contents[0].Text), 2000)])
			}
			// Bob: the same answers as for a session that does not exist.
			if res := testenv.Call(t, bob, "export_notebook", map[string]any{"session_id": sid}, nil); !res.IsError || !strings.Contains(testenv.Text(res), "no such session") {
				t.Fatalf("bob exported alice's notebook: %s", testenv.Text(res))
			}
			for _, uri := range []string{o.URI, "mcp://forge/sessions/" + sid + "/history"} {
				if _, err := bob.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil {
					t.Fatalf("bob read %s", uri)
				}
			}
			// Re-run the notebook's code cells in a fresh session: the same outputs.
			rerun := c.lang + "-rerun"
			for _, cell := range nb.Cells {
				run(t, alice, c.lang, rerun, strings.Join(cell.Source, ""))
			}
			var o2 notebookOut
			if res := testenv.Call(t, alice, "export_notebook", map[string]any{"session_id": rerun}, &o2); res.IsError {
				t.Fatal(testenv.Text(res))
			}
			var nb2 ipynb
			if err := json.Unmarshal([]byte(o2.Notebook), &nb2); err != nil {
				t.Fatal(err)
			}
			if g, w := got(nb2), got(nb); !sameOutputs(g, w) {
				t.Fatalf("re-run outputs %q, the notebook's %q", g, w)
			}
			for _, s := range []string{sid, rerun} {
				testenv.Call(t, alice, "destroy_session", map[string]any{"session_id": s}, nil)
			}
		})
	}
}

func sameOutputs(a, b [][]string) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The closing figure: the time to fork a session holding a 100 MB pandas
// DataFrame (pandas is in the Python image), and that the fork has it.
func TestForkLargeDataFrame(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, func(c *config.Config) { c.Execution.DefaultMemory = 1 << 30 })
	cs := p.Connect(t)
	setup := "import numpy as np, pandas as pd\ndf = pd.DataFrame(np.arange(13_107_200, dtype='float64').reshape(-1, 10))\nint(df.memory_usage(index=False).sum())"
	if o := run(t, cs, "python", "big", setup); o.Result != "104857600" {
		t.Fatalf("setup: %+v", o)
	}
	start := time.Now()
	o, res := fork(t, cs, "big", "big-fork")
	took := time.Since(start)
	if res.IsError {
		t.Fatalf("fork: %s", testenv.Text(res))
	}
	if got := run(t, cs, "python", "big-fork", "float(df.values.sum())").ResultRepr; got != "85899339366400.0" {
		t.Fatalf("the fork's DataFrame sums to %s", got)
	}
	t.Logf("fork of a session with a 100 MB DataFrame: %.2f s (server-side %.2f s), %d bytes copied", took.Seconds(), o.ForkTime, o.Bytes)
}

// Printed bytes that JSON escapes (here 0x01, six bytes each in the
// notebook) count as the notebook takes them: a history within
// sessions.history_bytes exports in one message an MCP client reads
// (counted raw, this notebook was 24 MiB and the client closed its
// connection), and the history resource reads too.
func TestNotebookOfUnprintableOutput(t *testing.T) {
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	for range 4 {
		run(t, cs, "python", "ctl", "import sys; sys.stdout.write('\\x01' * 1_000_000)")
	}
	run(t, cs, "python", "ctl", "print('done')")
	var o notebookOut
	if res := testenv.Call(t, cs, "export_notebook", map[string]any{"session_id": "ctl"}, &o); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	if o.Size > 6<<20 || o.Cells+o.Dropped != 5 {
		t.Fatalf("notebook of %d bytes, %d cells, %d dropped (history_bytes is 4 MiB)", o.Size, o.Cells, o.Dropped)
	}
	nbformatValidate(t, []byte(o.Notebook))
	var nb ipynb
	if err := json.Unmarshal([]byte(o.Notebook), &nb); err != nil || len(nb.Cells) == 0 {
		t.Fatalf("%v, %d cells", err, len(nb.Cells))
	}
	if last := nb.Cells[len(nb.Cells)-1]; len(last.Outputs) != 1 || outputs(last.Outputs[0]) != "stdout:done\n" {
		t.Fatalf("the last cell: %+v", last)
	}
	if _, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "mcp://forge/sessions/ctl/history"}); err != nil {
		t.Fatalf("history resource: %v", err)
	}
}

// A busy session's fork is refused at once (checkpoint-state), audited
// with the source, instead of waiting for the run with a session slot.
func TestForkOfBusySession(t *testing.T) {
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	run(t, cs, "python", "busy", "x = 1")
	done := make(chan out, 1)
	go func() {
		var o out
		testenv.Call(t, cs, "execute_python", map[string]any{"code": "import time; time.sleep(8)", "session_id": "busy"}, &o)
		done <- o
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var l struct {
			Sessions []struct {
				ID    string `json:"session_id"`
				State string `json:"state"`
			} `json:"sessions"`
		}
		testenv.Call(t, cs, "list_sessions", map[string]any{}, &l)
		if len(l.Sessions) == 1 && l.Sessions[0].State == "busy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session never showed busy: %+v", l)
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	o, res := fork(t, cs, "busy", "busy-fork")
	if took := time.Since(start); !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "busy") || took > 3*time.Second {
		t.Fatalf("fork of a busy session after %s: %s", took, testenv.Text(res))
	}
	if r := <-done; !r.Success {
		t.Fatalf("the run: %+v", r)
	}
	audit, err := os.ReadFile(p.Forge.Config.Security.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"rule":"checkpoint-state"`) || !strings.Contains(string(audit), `"tool":"fork_session"`) {
		t.Fatal("the refused fork is not in the audit log with its rule")
	}
}

// count forks at once come from one copy of the source, each its own
// session that diverges from the others; a count out of bounds, or an id
// among the forks that is taken, makes none.
func TestForkCount(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	run(t, cs, "python", "src", "x = 10\nopen('f.txt', 'w').write('from src')")
	var o forkOut
	res := testenv.Call(t, cs, "fork_session", map[string]any{"session_id": "src", "new_session_id": "c", "count": 3}, &o)
	if res.IsError || strings.Join(o.Forks, ",") != "c-1,c-2,c-3" || o.SessionID != "c-1" {
		t.Fatalf("fork count 3: %s %+v", testenv.Text(res), o)
	}
	t.Logf("three forks in %.2f s", o.ForkTime)
	for i, id := range o.Forks {
		got := run(t, cs, "python", id, fmt.Sprintf("x += %d\nprint(x, open('f.txt').read())", i+1)).Stdout
		if want := fmt.Sprintf("%d from src", 11+i); strings.TrimSpace(got) != want {
			t.Errorf("fork %s: %q, want %q", id, got, want)
		}
	}
	if got := strings.TrimSpace(run(t, cs, "python", "c-1", "print(x)").Stdout); got != "11" {
		t.Errorf("fork c-1 saw another fork's change: %q", got)
	}
	if got := strings.TrimSpace(run(t, cs, "python", "src", "print(x)").Stdout); got != "10" {
		t.Errorf("the source saw a fork's change: %q", got)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"too many", map[string]any{"session_id": "src", "count": 9}, "make 1 to 8 forks"},
		{"one id taken", map[string]any{"session_id": "src", "new_session_id": "c", "count": 4}, `"c-1" is taken`},
	} {
		res := testenv.Call(t, cs, "fork_session", tc.args, nil)
		if text := testenv.Text(res); !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s: %s, want a refusal saying %q", tc.name, text, tc.want)
		}
	}
	var l struct {
		Sessions []struct {
			ID string `json:"session_id"`
		} `json:"sessions"`
	}
	testenv.Call(t, cs, "list_sessions", map[string]any{}, &l)
	if len(l.Sessions) != 4 {
		t.Errorf("sessions after the refused forks: %+v, want src and c-1 … c-3", l.Sessions)
	}
}
