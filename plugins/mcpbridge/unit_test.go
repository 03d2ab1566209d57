package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// Regression: with no server configured the plugin refused its
// configuration, so every default start (bin/ holds this plugin) logged
// "plugin not loaded" and mcp_tools was refused as "no bridge plugin is
// loaded". Now it loads, lists nothing and refuses calls clearly.
func TestNoServersIsAnIdleBridge(t *testing.T) {
	b := newTestBridge(t, nil, "")
	tools, err := b.ListTools(context.Background())
	if err != nil || len(tools) != 0 {
		t.Fatalf("ListTools = %v, %v", tools, err)
	}
	res, err := b.CallTool(context.Background(), bridge.CallRequest{Server: "memory", Tool: "read_graph", Arguments: []byte("{}")})
	if err != nil || !res.IsError || !strings.Contains(res.Message, `no MCP server "memory" is configured (servers: none)`) {
		t.Fatalf("CallTool = %+v, %v", res, err)
	}
}

func TestParseConfig(t *testing.T) {
	const secret = "hunter2-secret-value"
	for _, tc := range []struct {
		name, cfg, err string
	}{
		{"stdio", `{"servers":{"a":{"command":"x","args":["1"],"env":{"K":"v"}}},"call_timeout":"5s"}`, ""},
		{"http", `{"servers":{"b":{"url":"https://example.com/mcp","headers":{"Authorization":"Bearer t"}}}}`, ""},
		// What the core sends: every plugin's output limits, and empty
		// fields of the other transport.
		{"core settings", `{"servers":{"a":{"command":"x","args":[],"env":{},"url":"","headers":{}},"b":{"command":"","args":[],"env":{},"url":"http://h/","headers":{}}},"call_timeout":"30s","max_output_bytes":1048576,"max_image_bytes":5242880,"default_memory":"512m","default_timeout":30,"max_timeout":1800}`, ""},
		{"negative limit", `{"servers":{"a":{"command":"x"}},"max_output_bytes":-1}`, "must not be negative"},
		// An idle bridge (a forge.toml without [mcp_tools]) is no error.
		{"empty", ``, ""},
		{"no servers", `{"servers":{}}`, ""},
		{"unknown key", `{"servers":{"a":{"command":"x","cmd":"y"}}}`, `unknown field "cmd"`},
		{"trailing", `{"servers":{"a":{"command":"x"}}} {}`, "trailing data"},
		{"both", `{"servers":{"a":{"command":"x","url":"http://h/"}}}`, "both command (stdio) and url"},
		{"neither", `{"servers":{"a":{}}}`, "needs command"},
		{"dotted name", `{"servers":{"a.b":{"command":"x"}}}`, `server "a.b": a server name must be`},
		{"keyword name", `{"servers":{"class":{"command":"x"}}}`, "not a Python or R keyword"},
		{"underscore name", `{"servers":{"_x":{"command":"x"}}}`, "a server name must be"},
		{"bad timeout", `{"servers":{"a":{"command":"x"}},"call_timeout":"soon"}`, `call_timeout "soon" is not a positive duration`},
		{"negative timeout", `{"servers":{"a":{"command":"x"}},"call_timeout":"-1s"}`, "not a positive duration"},
		{"headers on stdio", `{"servers":{"a":{"command":"x","headers":{"A":"b"}}}}`, "headers apply to url servers only"},
		{"env on http", `{"servers":{"a":{"url":"http://h/","env":{"A":"b"}}}}`, "env and args apply to command servers only"},
		{"bad env name", `{"servers":{"a":{"command":"x","env":{"A-B":"` + secret + `"}}}}`, `env name "A-B" is not a valid variable name`},
		{"NUL in env", `{"servers":{"a":{"command":"x","env":{"A":"` + secret + `\u0000"}}}}`, "the value of env A contains a NUL byte"},
		{"bad url", `{"servers":{"a":{"url":"ftp://h/"}}}`, "not an http:// or https:// URL"},
		{"bad header", `{"servers":{"a":{"url":"http://h/","headers":{"A":"` + secret + `\r\nX: y"}}}}`, "the value of header A contains a line break"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := parseConfig([]byte(tc.cfg))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.name == "stdio" && pc.CallTimeout != 5*time.Second || tc.name == "http" && pc.CallTimeout != DefaultCallTimeout {
					t.Fatalf("timeout %s", pc.CallTimeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("want an error containing %q, got %v", tc.err, err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows a secret value: %v", err)
			}
		})
	}
}

func TestRedactor(t *testing.T) {
	pc, err := parseConfig([]byte(`{"servers":{"a":{"command":"x","env":{"TOKEN":"abcd1234","SHORT":"1"}},"b":{"url":"https://u:pw-secret@h/mcp?key=qk-secret","headers":{"Authorization":"Bearer tok-5678"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := newRedactor(pc.secrets())
	got := r.String("env abcd1234, Bearer tok-5678 or tok-5678 alone, pw-secret, qk-secret, count 1")
	if want := "env [redacted], [redacted] or [redacted] alone, [redacted], [redacted], count 1"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestMapNames(t *testing.T) {
	in := []string{"get-user", "get_user", "class", "1st", "a.b", "a_b", "ok", "", "ünïcode", strings.Repeat("x", 80) + "-"}
	want := map[string]string{"get_user": "get_user", "get-user": "get_user_2", "class": "class_", "1st": "t_1st",
		"a_b": "a_b", "a.b": "a_b_2", "ok": "ok", "": "t_", "ünïcode": "t__n_code"}
	got := mapNames(in, "t_", nil)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q → %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(in) {
		t.Fatalf("%d names mapped of %d: %v", len(got), len(in), got)
	}
	seen := map[string]bool{}
	for k, v := range got {
		if seen[v] || !identRE.MatchString(v) || len(v) > maxIdent+4 || reserved[v] {
			t.Errorf("%q → %q: not a distinct identifier", k, v)
		}
		seen[v] = true
	}
	// Deterministic whatever the order.
	rev := append([]string(nil), in...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for k, v := range mapNames(rev, "t_", nil) {
		if got[k] != v {
			t.Errorf("order changes %q: %q vs %q", k, v, got[k])
		}
	}
}

// pyStr's literals evaluate to the original string in Python, whatever it
// holds; commentLines leaves no line terminator.
func TestPythonLiteralsAndComments(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	inputs := []string{hostileText, hostileName, `'''"""\`, "\x00\x01\x7f\u0085\u2028\u2029\ufeff", "é😀\U0010ffff", "plain"}
	var lits []string
	for _, s := range inputs {
		lits = append(lits, pyStr(s))
		for _, l := range commentLines(s) {
			if strings.ContainsAny(l, "\r\n\v\f\u0085\u2028\u2029") {
				t.Errorf("comment line %q has a line terminator", l)
			}
		}
		if strings.ContainsFunc(pyStr(s)+rStr(s), func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			t.Errorf("literal of %q is not printable ASCII", s)
		}
	}
	script := "import json, sys\nprint(json.dumps([" + strings.Join(lits, ", ") + "]))\n"
	out, err := exec.Command(py, "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for i := range inputs {
		if got[i] != inputs[i] {
			t.Errorf("literal %s evaluates to %q, want %q", lits[i], got[i], inputs[i])
		}
	}
}
