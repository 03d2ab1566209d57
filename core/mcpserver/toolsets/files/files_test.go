package files

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
)

func TestParseFileURI(t *testing.T) {
	for _, tc := range []struct {
		uri     string
		id, rel string
		part    int
		ok      bool
	}{
		{uri: "mcp://forge/sessions/s1/files/output/a.csv", id: "s1", rel: "output/a.csv", part: -1, ok: true},
		{uri: "mcp://forge/sessions/s1/files/a%20b/c%2Fd", id: "s1", rel: "a b/c/d", part: -1, ok: true},
		{uri: "mcp://forge/sessions/s1/parts/0/data/f8", id: "s1", rel: "data/f8", part: 0, ok: true},
		{uri: "mcp://forge/sessions/s1/parts/12/x", id: "s1", rel: "x", part: 12, ok: true},
		{uri: "mcp://forge/sessions/s1/parts/-1/x"},
		{uri: "mcp://forge/sessions/s1/parts/01/x"},
		{uri: "mcp://forge/sessions/s1/parts/a/x"},
		{uri: "mcp://forge/sessions/s1/parts/1"},
		{uri: "mcp://forge/sessions/s1/files/"},
		{uri: "mcp://forge/sessions//files/x"},
		{uri: "mcp://forge/sessions/s1/other/x"},
		{uri: "mcp://forge/sessions/s1/files/x?part=1"},
		{uri: "mcp://forge/jobs/j1"},
	} {
		id, rel, part, ok := parseFileURI(tc.uri)
		if ok != tc.ok || (ok && (id != tc.id || rel != tc.rel || part != tc.part)) {
			t.Errorf("parseFileURI(%q) = %q, %q, %d, %v", tc.uri, id, rel, part, ok)
		}
	}
	if got := toolsets.FilePartURI("s1", "a b/c", 3); got != "mcp://forge/sessions/s1/parts/3/a%20b/c" {
		t.Errorf("FilePartURI = %s", got)
	}
}

// A part and its base64 fit one answer with room for the answer's fields.
func TestPartSize(t *testing.T) {
	for _, limit := range []config.Size{1 << 20, 8 << 20, 16 << 20, 64 << 20} {
		p := PartSize(config.Config{Server: config.Server{MaxMessage: limit}})
		if enc := p * 4 / 3; enc+64<<10 > int64(limit) || p < 64<<10 {
			t.Errorf("max_message %s: parts of %d bytes (%d in base64)", limit, p, enc)
		}
	}
}

func TestDisplayName(t *testing.T) {
	for in, want := range map[string]string{
		"data/in.csv":               "data/in.csv",
		"é 中.txt":                   "é 中.txt",
		"a\n- forged.txt (2 bytes)": `"a\n- forged.txt (2 bytes)"`,
		"b\r\x1b[2K":                `"b\r\x1b[2K"`,
		`q"uote`:                    `"q\"uote"`,
	} {
		if got := displayName(in); got != want {
			t.Errorf("displayName(%q) = %s, want %s", in, got, want)
		}
	}
}
