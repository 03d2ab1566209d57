package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// HostileSecret is what the hostile server gets in HOSTILE_TOKEN: what
// encoders treat specially (non-ASCII in and beyond the BMP, space, "/",
// "+", quotes, "&"), around a distinctive ASCII core that Leaks looks for.
const hostileSecret = `Hö$tile/S3cretCore+ "quoted" & 😀 ∑ end`

// hostileCore is the part of hostileSecret a leak would show.
const hostileCore = "S3cretCore"

// hostileServer is the Python server that echoes its environment in many
// encodings; the test skips without python3.
func hostileServer(t testing.TB) ServerConfig {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the hostile MCP server is a Python script")
	}
	return ServerConfig{Command: py, Args: []string{filepath.Join(repoRoot(), "plugins", "mcpbridge", "testdata", "hostileserver.py")},
		Env: map[string]string{"HOSTILE_TOKEN": hostileSecret}}
}

// Issue 20 item 6: a server that echoes its secret JSON-escaped (\u00f6,
// surrogate pairs, upper case, \/, nested), URL-encoded (%22, +, %20,
// lower-case hex), as HTML, base64 (std and URL, padded or not, at each
// alignment, MIME lines) or hex gets none of it past the plugin: not in
// the text, the structured content or a tool error.
func TestHostileServerSecrets(t *testing.T) {
	b := newTestBridge(t, map[string]ServerConfig{"hostile": hostileServer(t)}, "10s")
	for _, tool := range []string{"dump", "dump_text", "dump_error"} {
		r := call(t, b, "hostile", tool, nil)
		all := r.Text + "\n" + string(r.Structured) + "\n" + r.Message
		if tool == "dump" && (r.IsError || len(r.Structured) == 0) || tool == "dump_text" && (r.IsError || r.Text == "") || tool == "dump_error" && !r.IsError {
			t.Fatalf("%s: %+v", tool, r)
		}
		// The server did print every section, with the secret in it.
		for _, section := range []string{"json:", "json-upper:", "json-nested:", "urlencode:", "quote-lower:", "ascii:", "html:", "HEX:", "b64-2:", "b64url-1:", "b64-mime:", "b64-json:"} {
			if !strings.Contains(all, "\n"+section) && !strings.HasPrefix(all, section) {
				t.Errorf("%s: section %s missing", tool, section)
			}
		}
		if n := strings.Count(all, "[redacted]"); n < 20 {
			t.Errorf("%s: only %d redactions", tool, n)
		}
		if leaks := sdktest.Leaks(all, hostileCore); len(leaks) > 0 || strings.Contains(all, "Hö$tile") {
			t.Errorf("%s: the secret can be read back (%s):\n%s", tool, strings.Join(leaks, "; "), all)
		}
	}
	tools, err := b.ListTools(context.Background())
	if err != nil || len(tools) != 3 {
		t.Fatalf("%v %+v", err, tools)
	}
}
