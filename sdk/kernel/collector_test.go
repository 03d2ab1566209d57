package kernel

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// The output cap never splits a character: a split one is invalid UTF-8,
// which would make the whole result unsendable.
func TestCollectorCutsOnCharacters(t *testing.T) {
	c := &collector{b: &Backend{}, maxOut: 6, maxImg: 100}
	c.event(jupyter.Event{Kind: "stream", Name: "stdout", Text: "ab✓✓"}) // 2 + 3 + 3 bytes
	c.event(jupyter.Event{Kind: "stream", Name: "stdout", Text: "c"})
	// After a cut nothing follows: the output stays a prefix of what was printed.
	if c.res.Stdout != "ab✓" || c.res.StdoutBytes != 9 || !utf8.ValidString(c.res.Stdout) {
		t.Fatalf("stdout %q (%d bytes produced)", c.res.Stdout, c.res.StdoutBytes)
	}
}

// Invalid UTF-8 that the kernel sent (and decoding replaced) is noted.
func TestCollectorNotesReplacedText(t *testing.T) {
	c := &collector{b: &Backend{}, maxOut: 100, maxImg: 100}
	c.event(jupyter.Event{Kind: "stream", Name: "stdout", Text: "\uFFFD", InvalidUTF8: true})
	res := c.b.finish(c, jupyter.Reply{Status: "ok"}, false, time.Second, time.Now())
	if len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "U+FFFD") {
		t.Fatalf("notices %q", res.Notices)
	}
	c = &collector{b: &Backend{}, maxOut: 100, maxImg: 100}
	if res := c.b.finish(c, jupyter.Reply{Status: "ok"}, false, time.Second, time.Now()); len(res.Notices) != 0 {
		t.Fatalf("notices %q", res.Notices)
	}
}

// A session's images are bounded in total as a stateless run's are, so a
// loop of plots cannot make a result no message can carry.
func TestCollectorImageBudget(t *testing.T) {
	png := "\x89PNG\r\n\x1a\n" + strings.Repeat("x", 90)
	c := &collector{b: &Backend{}, maxOut: 100, maxImg: 100}
	for range 6 {
		c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"image/png": base64.StdEncoding.EncodeToString([]byte(png))}})
	}
	if len(c.res.Images) != 4 || len(c.res.Notices) != 2 || !strings.Contains(c.res.Notices[0], "4 × execution.max_image_size") {
		t.Fatalf("%d images, notices %q", len(c.res.Images), c.res.Notices)
	}
}

// A result is bounded like output: 'r' * 20_000_000 must not make an
// answer no client reads (found by the hostile review).
func TestCollectorBoundsTheResult(t *testing.T) {
	c := &collector{b: &Backend{}, maxOut: 100, maxImg: 100}
	big := strings.Repeat("é", 80) // 160 bytes: a cut at 100 lands inside none
	c.event(jupyter.Event{Kind: "execute_result", Data: map[string]any{"text/plain": big, "text/html": "<b>" + big + "</b>", "text/markdown": "ok"}})
	if len(c.res.ResultRepr) > 100 || !strings.HasPrefix(big, c.res.ResultRepr) || c.res.ResultRepr == "" {
		t.Fatalf("result of %d bytes: %.20q", len(c.res.ResultRepr), c.res.ResultRepr)
	}
	if _, ok := c.res.Rich["text/html"]; ok || c.res.Rich["text/markdown"] != "ok" {
		t.Fatalf("rich %v", c.res.Rich)
	}
	if len(c.res.Notices) != 2 {
		t.Fatalf("notices %q", c.res.Notices)
	}
}

// display(HTML(...)) and display(Markdown(...)) come back as rich output,
// each type's in the order shown, the final value's after them; over the
// output limit a type's next output is left out with a notice.
func TestDisplayedRichOutputIsKept(t *testing.T) {
	c := &collector{b: &Backend{}, maxOut: 40, maxImg: 100}
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"text/html": "<b>one</b>", "text/plain": "<HTML>"}})
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"text/markdown": "# hi", "text/plain": "<Markdown>"}})
	c.event(jupyter.Event{Kind: "execute_result", Data: map[string]any{"text/html": "<i>last</i>", "text/plain": "<HTML>"}})
	if got := c.res.Rich["text/html"]; got != "<b>one</b>\n<i>last</i>" {
		t.Fatalf("text/html %q", got)
	}
	if got := c.res.Rich["text/markdown"]; got != "# hi" {
		t.Fatalf("text/markdown %q", got)
	}
	c.event(jupyter.Event{Kind: "display_data", Data: map[string]any{"text/html": strings.Repeat("x", 30)}})
	if got := c.res.Rich["text/html"]; got != "<b>one</b>\n<i>last</i>" || len(c.res.Notices) != 1 {
		t.Fatalf("over the limit: %q, notices %v", got, c.res.Notices)
	}
}
