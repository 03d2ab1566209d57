package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func pngCount(res *mcp.CallToolResult) int {
	n := 0
	for _, c := range res.Content {
		if im, ok := c.(*mcp.ImageContent); ok && im.MIMEType == "image/png" && len(im.Data) > 100 && string(im.Data[1:4]) == "PNG" {
			n++
		}
	}
	return n
}

func TestExecuteRStateless(t *testing.T) {
	s := testenv.StartServer(t, "")
	cases := []struct {
		name    string
		args    map[string]any
		isError bool
		check   func(t *testing.T, o out, res *mcp.CallToolResult)
	}{
		{"print", map[string]any{"code": `print("hello")`}, false, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Stdout != "[1] \"hello\"\n" {
				t.Errorf("%q", o.Stdout)
			}
		}},
		{"stderr separate", map[string]any{"code": "message('to stderr')\ncat('to stdout\\n')"}, false, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Stdout != "to stdout\n" || o.Stderr != "to stderr\n" {
				t.Errorf("stdout %q stderr %q", o.Stdout, o.Stderr)
			}
		}},
		{"last value as JSON", map[string]any{"code": "x <- 41\nx + 1"}, false, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Result != "42" || o.ResultRepr != "[1] 42" {
				t.Errorf("result %#v repr %q", o.Result, o.ResultRepr)
			}
		}},
		{"list as JSON", map[string]any{"code": "list(a = 1, b = c('x', 'y'))"}, false, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			var m struct {
				A float64
				B []string
			}
			if err := json.Unmarshal([]byte(o.Result), &m); err != nil || m.A != 1 || len(m.B) != 2 {
				t.Errorf("%#v", o.Result)
			}
		}},
		{"data.frame as text", map[string]any{"code": "data.frame(a = 1:2)"}, false, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Result != "" || !strings.Contains(o.ResultRepr, "a") {
				t.Errorf("result %#v repr %q", o.Result, o.ResultRepr)
			}
		}},
		{"error with line", map[string]any{"code": "f <- function(v) {\n  stop('bad input: ', v)\n}\ny <- 1\nf(y)"}, true, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Error == nil || o.Error.Line != 2 || !strings.Contains(o.Error.Message, "bad input: 1") {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"syntax error", map[string]any{"code": "x <- 1\ny <- (2\nz <- 3"}, true, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Error == nil || o.Error.Type != "SyntaxError" || o.Error.Line != 3 {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"timeout", map[string]any{"code": "Sys.sleep(120)", "timeout": 3}, true, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Error == nil || o.Error.Type != "Timeout" {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"plot", map[string]any{"code": "plot(1:10)"}, false, func(t *testing.T, o out, res *mcp.CallToolResult) {
			if pngCount(res) != 1 {
				t.Errorf("%d images: %s", pngCount(res), testenv.Text(res))
			}
		}},
		{"no network", map[string]any{"code": "con <- socketConnection('1.1.1.1', 80, timeout = 3)"}, true, func(t *testing.T, o out, _ *mcp.CallToolResult) {
			if o.Error == nil {
				t.Error("connected")
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o out
			res := s.Call(t, "execute_r", tc.args, &o)
			if res.IsError != tc.isError {
				t.Errorf("isError = %v: %s", res.IsError, testenv.Text(res))
			}
			tc.check(t, o, res)
		})
	}
}

func TestRSessions(t *testing.T) {
	s := testenv.StartServer(t, "")
	call := sessionCaller(t, s, "execute_r")
	t.Run("state persists", func(t *testing.T) {
		if _, res := call("x <- 41", "ra", 0); res.IsError {
			t.Fatal(testenv.Text(res))
		}
		if o, _ := call("x + 1", "ra", 0); o.ResultRepr != "[1] 42" {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("isolation", func(t *testing.T) {
		call("x <- 'b'", "rb", 0)
		if o, _ := call("x", "ra", 0); o.ResultRepr != "[1] 41" {
			t.Fatalf("%+v", o)
		}
	})
	t.Run("plot", func(t *testing.T) {
		_, res := call("plot(1:10)", "ra", 0)
		if pngCount(res) != 1 {
			t.Fatalf("%d images: %s", pngCount(res), testenv.Text(res))
		}
	})
	t.Run("interrupt on timeout keeps state", func(t *testing.T) {
		start := time.Now()
		o, res := call("Sys.sleep(100)", "ra", 2)
		if !res.IsError || o.ExitCode == 0 || o.Error == nil || o.Error.Type != "Timeout" || !strings.Contains(o.Error.Message, "kept") {
			t.Fatalf("%+v %s", o.Error, testenv.Text(res))
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("interrupt took %s", time.Since(start))
		}
		if o, _ := call("x", "ra", 0); o.ResultRepr != "[1] 41" {
			t.Fatalf("state lost: %+v", o)
		}
	})
	t.Run("introspection and document_state", func(t *testing.T) {
		call("df <- data.frame(n = 1:3, s = c('a', 'b', 'c'))", "ra", 0)
		var v mcpserver.SessionView
		res := s.Call(t, "document_state", map[string]any{"session_id": "ra", "variables": map[string]string{"df": "toy data"}, "note": "R notes"}, &v)
		if res.IsError || v.Documented["df"] != "toy data" || v.Note != "R notes" || v.Language != "r" {
			t.Fatalf("%s", testenv.Text(res))
		}
		var found bool
		for _, x := range v.Variables {
			if x.Name != "df" {
				continue
			}
			found = true
			d := x.Details
			if x.Type != "data.frame" || d["rows"] != float64(3) || len(d["columns"].([]any)) != 2 || d["column_classes"].([]any)[1] != "character" || x.Size <= 0 || len(x.Repr) > 100 {
				t.Errorf("df: %+v", x)
			}
			if dim, ok := d["dim"].([]any); !ok || dim[0] != float64(3) || dim[1] != float64(2) {
				t.Errorf("dim %+v", d["dim"])
			}
		}
		if !found {
			t.Fatalf("df not introspected: %+v", v.Variables)
		}
		var st mcpserver.SessionView
		if err := readJSON(t, s.Session, "mcp://forge/sessions/ra/state", &st); err != nil || st.Note != "R notes" {
			t.Fatalf("%v %+v", err, st)
		}
	})
	t.Run("language of a session", func(t *testing.T) {
		res := s.Call(t, "execute_python", map[string]any{"code": "1", "session_id": "ra"}, nil)
		if !res.IsError || !strings.Contains(testenv.Text(res), `session "ra" runs R: run R code in it with execute_r`) {
			t.Fatal(testenv.Text(res))
		}
	})
	t.Run("error", func(t *testing.T) {
		o, res := call("stop('boom')", "ra", 0)
		if !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "boom") {
			t.Fatalf("%+v", o.Error)
		}
	})
}
