package limits

import (
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// A result is cut to what one answer carries, counted as JSON: 1 MiB of
// control bytes (six bytes each once escaped) was sent whole before.
func TestCapResult(t *testing.T) {
	img := func(n int) backend.Image {
		return backend.Image{Name: "p.png", MIMEType: "image/png", Data: make([]byte, n)}
	}
	for _, tc := range []struct {
		name                   string
		stdout                 string
		images                 []backend.Image
		wantStdout, wantImages int
		notice                 bool
	}{
		{name: "plain text within max_output", stdout: strings.Repeat("y", 600), wantStdout: 600},
		{name: "control bytes cut by their escaped size", stdout: strings.Repeat("\x01", 600), wantStdout: 1000 / 6},
		{name: "newlines count twice", stdout: strings.Repeat("\n", 600), wantStdout: 500},
		{name: "images within half the message", images: []backend.Image{img(1000), img(1000)}, wantImages: 2},
		{name: "images past half the message left out", images: []backend.Image{img(3000), img(3000), img(3000)}, wantImages: 1, notice: true},
		{name: "more than MaxImages", images: make([]backend.Image, MaxImages+3), wantImages: MaxImages, notice: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Limits{output: 1000, message: 10000}
			res := backend.ExecuteResult{Stdout: tc.stdout, Stderr: tc.stdout, Images: tc.images}
			l.Cap(&res)
			if len(res.Stdout) != tc.wantStdout || len(res.Stderr) != tc.wantStdout {
				t.Errorf("stdout %d bytes, stderr %d, want %d", len(res.Stdout), len(res.Stderr), tc.wantStdout)
			}
			if sanitize.JSONLen(res.Stdout) > 1000 {
				t.Errorf("stdout is %d bytes in JSON, over max_output", sanitize.JSONLen(res.Stdout))
			}
			if len(res.Images) != tc.wantImages || (len(res.Notices) > 0) != tc.notice {
				t.Errorf("images %d (want %d), notices %q", len(res.Images), tc.wantImages, res.Notices)
			}
		})
	}
}

// The error, the value's forms and rich output are cut too, counted as
// JSON: they travel in the text, the error and the traceback.
func TestCapText(t *testing.T) {
	l := Limits{output: 1 << 20, message: 9 << 20}
	tb := make([]string, 100)
	for i := range tb {
		tb[i] = strings.Repeat("\x01", 10<<10)
	}
	res := backend.ExecuteResult{
		Error:      &backend.ExecError{Name: "ValueError", Message: strings.Repeat("\x01", 5_000_000), Traceback: tb},
		ResultRepr: strings.Repeat("<", 1<<20), ResultJSON: `"` + strings.Repeat("\\\\", 1<<18) + `"`,
		Rich: map[string]string{"text/html": strings.Repeat("<", 1<<20), "text/markdown": strings.Repeat("&", 1<<20), "text/plain": "ok"},
	}
	l.Cap(&res)
	if n := sanitize.JSONLen(res.Error.Message); n > maxErrorMessage+16 {
		t.Errorf("error message %d bytes as JSON", n)
	}
	total := 0
	for _, l := range res.Error.Traceback {
		total += sanitize.JSONLen(l)
	}
	if total > maxTraceback+16 || res.Error.Traceback[len(res.Error.Traceback)-1] != sanitize.CutJSON(tb[99], maxTraceLine) || !strings.HasPrefix(res.Error.Traceback[0], "[…]") {
		t.Errorf("traceback: %d lines, %d bytes as JSON", len(res.Error.Traceback), total)
	}
	if n := sanitize.JSONLen(res.ResultRepr); n > 1<<18+16 || res.ResultJSON != "" {
		t.Errorf("repr %d bytes as JSON, JSON form %d bytes", n, len(res.ResultJSON))
	}
	rich := 0
	for _, v := range res.Rich {
		rich += sanitize.JSONLen(v)
	}
	if rich > 1<<20 || len(res.Notices) != 1 || res.Rich["text/plain"] != "ok" {
		t.Errorf("rich %d bytes as JSON, notices %q", rich, res.Notices)
	}
}
