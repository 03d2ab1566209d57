package kernel

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/jupyter"
)

func TestCollector(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n" + strings.Repeat("x", 50)
	var emitted []backend.StreamEvent
	c := &collector{b: &Backend{spec: Spec{}}, maxOut: 10, maxImg: 100, emit: func(e backend.StreamEvent) { emitted = append(emitted, e) }}
	c.event(jupyter.Event{Kind: "stream", Name: "stdout", Text: "hello world, this is long"})
	c.event(jupyter.Event{Kind: "stream", Name: "stderr", Text: "warn"})
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"image/png": base64.StdEncoding.EncodeToString([]byte(png)), "text/plain": "<Figure>"}})
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"image/png": base64.StdEncoding.EncodeToString([]byte(strings.Repeat("y", 500)))}})
	c.event(jupyter.Event{Kind: "execute_result", Data: map[string]any{"text/plain": "42", "text/html": "<b>42</b>"}})
	r := c.res
	if r.Stdout != "hello worl" || r.StdoutBytes != 25 || r.Stderr != "warn" || len(emitted) != 2 {
		t.Errorf("streams: %+v, emitted %d", r, len(emitted))
	}
	if len(r.Images) != 1 || string(r.Images[0].Data) != png || r.Images[0].MIMEType != "image/png" {
		t.Errorf("images: %+v", r.Images)
	}
	if len(r.Notices) != 1 || !strings.Contains(r.Notices[0], "image limit") {
		t.Errorf("notices: %v", r.Notices)
	}
	if r.ResultRepr != "42" || r.ResultJSON != "42" || r.Rich["text/html"] != "<b>42</b>" {
		t.Errorf("result: %q %q %v", r.ResultRepr, r.ResultJSON, r.Rich)
	}
	// A display with text only is a plain display for Python, the value for R.
	c = &collector{b: &Backend{spec: Spec{ValuesAsDisplay: true}}, maxOut: 100, maxImg: 100}
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"text/plain": "[1] 42", "text/html": "42"}})
	if c.res.ResultRepr != "[1] 42" || c.res.ResultJSON != "" {
		t.Errorf("R value: %+v", c.res)
	}
}

func TestStripANSI(t *testing.T) {
	if got := StripANSI("\x1b[0;31mZeroDivisionError\x1b[0m: x"); got != "ZeroDivisionError: x" {
		t.Fatal(got)
	}
}
