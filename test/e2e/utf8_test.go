package e2e

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Output that is not valid UTF-8 (bytes written under Python's text layer,
// or a character cut by the output cap) comes back as a tool result with the
// bad bytes replaced or the cut character dropped. Before, protobuf refused
// to carry the plugin's result ("string field contains invalid UTF-8") and
// the call failed. Found by FuzzEnvelope and FuzzCollectorStreams.
func TestInvalidUTF8Output(t *testing.T) {
	s := testenv.StartServer(t, "[execution]\nmax_output = \"1k\"\n")
	cases := []struct {
		name   string
		args   map[string]any
		stdout func(string) bool
	}{
		{"stateless raw bytes", map[string]any{"code": "import os\nos.write(1, b'ok \\xff\\xfe\\n')"},
			func(s string) bool { return strings.Contains(s, "ok \uFFFD\n") }},
		{"session output cut in a character", map[string]any{"code": "print('x' + 'é' * 1000)", "session_id": "utf8"},
			func(s string) bool { return s == "x"+strings.Repeat("é", 511) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o out
			res := s.Call(t, "execute_python", c.args, &o)
			if res.IsError || !o.Success {
				t.Fatalf("%s (%+v)", testenv.Text(res), o)
			}
			if !utf8.ValidString(o.Stdout) || !c.stdout(o.Stdout) {
				t.Fatalf("stdout %q", o.Stdout)
			}
		})
	}
}
