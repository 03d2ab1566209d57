package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// pngs are the PNG images of a tool result, in order.
func pngs(res *mcp.CallToolResult) [][]byte {
	var out [][]byte
	for _, c := range res.Content {
		if im, ok := c.(*mcp.ImageContent); ok && im.MIMEType == "image/png" && len(im.Data) > 8 && string(im.Data[1:4]) == "PNG" {
			out = append(out, im.Data)
		}
	}
	return out
}

// exportedCell is the summary (outputs()) of the images and errors of the
// last cell of session sid's exported notebook (a value such as
// plt.plot's list is left out).
func exportedCell(t *testing.T, cs *mcp.ClientSession, sid string) []string {
	t.Helper()
	var o notebookOut
	if res := testenv.Call(t, cs, "export_notebook", map[string]any{"session_id": sid}, &o); res.IsError {
		t.Fatalf("export_notebook %s: %s", sid, testenv.Text(res))
	}
	var nb ipynb
	if err := json.Unmarshal([]byte(o.Notebook), &nb); err != nil || len(nb.Cells) == 0 {
		t.Fatalf("export_notebook %s: %v, %d cells", sid, err, len(nb.Cells))
	}
	var outs []string
	for _, x := range nb.Cells[len(nb.Cells)-1].Outputs {
		if s := outputs(x); strings.HasPrefix(s, "image:") || strings.HasPrefix(s, "error:") {
			outs = append(outs, s)
		}
	}
	return outs
}

// A cell's plots come back from a session as from a stateless run,
// whatever device or backend the code chose: matplotlib figures left open
// under Agg (matplotlib.use, %matplotlib) once each, as the stateless
// runner draws them (the same PNG bytes), and closed, so the next cell
// does not send them again; R plots drawn on a device opened with
// dev.new(). A device the code opened to a file is a file in a session's
// workspace, not an inline plot (a stateless run returns the image files
// it wrote); a figure the code closed, or pdf(NULL), is nothing in either.
// The images are in the exported notebook's cell.
func TestPlotsWhateverBackend(t *testing.T) {
	testenv.Parallel(t)
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	const agg = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
	cases := []struct {
		name, lang, code  string
		session           int  // images from a fresh session's cell
		stateless         int  // images from a stateless run; -1: not run (not valid outside a session)
		sameBytes         bool // the session's images are the stateless run's
		afterSession, not string
	}{
		{"python agg", "python", agg + "plt.plot([1, 2, 3])", 1, 1, true, "", ""},
		{"python agg show", "python", agg + "plt.plot([1, 2, 3])\nplt.show()", 1, 1, true, "", ""},
		{"python agg object API two figures", "python", agg + "fig, ax = plt.subplots()\nax.plot([1, 2])\nfig2, ax2 = plt.subplots()\nax2.bar(['a', 'b'], [3, 1])", 2, 2, true, "", ""},
		{"python agg error after plot", "python", agg + "plt.plot([1, 2, 3])\n1 / 0", 1, 1, true, "", ""},
		{"python agg closed by the code", "python", agg + "plt.plot([1, 2, 3])\nplt.close()", 0, 0, false, "", ""},
		// The stateless run also returns the file savefig wrote; the session keeps it in the workspace.
		{"python agg savefig show", "python", agg + "plt.plot([1, 2, 3])\nplt.savefig('p.png')\nplt.show()", 1, 2, false, "", ""},
		{"python %matplotlib agg", "python", "%matplotlib agg\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])", 1, -1, false, "", ""},
		// The inline backend draws at its own size: one image, no duplicate.
		{"python inline", "python", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()", 1, 1, false, "", ""},
		{"r plot", "r", "plot(1:10)", 1, 1, false, "", ""},
		{"r dev.new", "r", "dev.new()\nplot(1:10)", 1, 1, false, "", ""},
		{"r png file", "r", "png('x.png')\nplot(1:10)\ndev.off()", 0, 1, false, "x.png", ""},
		{"r pdf null", "r", "pdf(NULL)\nplot(1:10)", 0, 0, false, "", "Rplots.pdf"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sid := fmt.Sprintf("plots-%d", i)
			var o out
			res := testenv.Call(t, cs, "execute_"+c.lang, map[string]any{"code": c.code, "session_id": sid}, &o)
			defer testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": sid}, nil)
			if o.Error != nil && o.Error.Type == "RequestError" {
				t.Fatalf("session: %s", testenv.Text(res))
			}
			got := pngs(res)
			if len(got) != c.session {
				t.Fatalf("session: %d PNG images, want %d: %s", len(got), c.session, testenv.Text(res))
			}
			var want []string
			for range c.session {
				want = append(want, "image:image/png")
			}
			if c.lang == "python" && strings.HasSuffix(c.code, "1 / 0") {
				want = append(want, "error:ZeroDivisionError")
			}
			if cell := exportedCell(t, cs, sid); !sameOutputs([][]string{cell}, [][]string{want}) {
				t.Errorf("exported cell's outputs %q, want %q", cell, want)
			}
			// Closed once sent: the next cell sends nothing again.
			if again := testenv.Call(t, cs, "execute_"+c.lang, map[string]any{"code": "1", "session_id": sid}, nil); len(pngs(again)) != 0 {
				t.Errorf("the next cell sent %d images again", len(pngs(again)))
			}
			for name, want := range map[string]bool{c.afterSession: true, c.not: false} {
				if name == "" {
					continue
				}
				var l struct {
					Files []struct {
						Path string `json:"path"`
					} `json:"files"`
				}
				testenv.Call(t, cs, "list_files", map[string]any{"session_id": sid}, &l)
				found := false
				for _, f := range l.Files {
					found = found || f.Path == name
				}
				if found != want {
					t.Errorf("file %s in the session's workspace: %v, want %v (%+v)", name, found, want, l.Files)
				}
			}
			if c.stateless < 0 {
				return
			}
			sres := testenv.Call(t, cs, "execute_"+c.lang, map[string]any{"code": c.code}, nil)
			sgot := pngs(sres)
			if len(sgot) != c.stateless {
				t.Fatalf("stateless: %d PNG images, want %d: %s", len(sgot), c.stateless, testenv.Text(sres))
			}
			if c.sameBytes {
				for j := range got {
					if !bytes.Equal(got[j], sgot[j]) {
						t.Errorf("image %d: the session's (%d bytes) is not the stateless run's (%d bytes)", j+1, len(got[j]), len(sgot[j]))
					}
				}
			}
		})
	}
}

// In one session: the inline backend's plot, then the same cell after
// matplotlib.use('Agg') (pyplot already imported), then after
// restart_session (the capture outlives %reset), each one image.
func TestSessionPlotsAcrossBackendSwitch(t *testing.T) {
	p := testenv.NewInProcess(t, nil)
	cs := p.Connect(t)
	const sid = "switch"
	for _, step := range []struct{ name, code string }{
		{"inline", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])"},
		{"switched to agg", "import matplotlib\nmatplotlib.use('Agg')\nplt.plot([3, 2, 1])"},
		{"after restart", "restart"},
		{"agg after restart", "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"},
	} {
		if step.code == "restart" {
			if res := testenv.Call(t, cs, "restart_session", map[string]any{"session_id": sid}, nil); res.IsError {
				t.Fatalf("restart_session: %s", testenv.Text(res))
			}
			continue
		}
		res := testenv.Call(t, cs, "execute_python", map[string]any{"code": step.code, "session_id": sid}, nil)
		if n := len(pngs(res)); n != 1 {
			t.Fatalf("%s: %d PNG images, want 1: %s", step.name, n, testenv.Text(res))
		}
		if cell := exportedCell(t, cs, sid); !sameOutputs([][]string{cell}, [][]string{{"image:image/png"}}) {
			t.Errorf("%s: exported cell's outputs %q", step.name, cell)
		}
	}
}
