package sdktest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Snippets are the programs the conformance suite runs, in the backend's
// language.
type Snippets struct {
	Language     string
	Print        string // prints exactly "hello" and a newline
	Expr         string // a program whose final expression is 41 + 1
	SyntaxError  string // fails to parse on SyntaxLine
	SyntaxLine   int
	RuntimeError string // fails at run time on RuntimeLine
	RuntimeLine  int
	Sleep        string // runs for at least 30 seconds
	Stderr       string // writes "oops" to stderr and succeeds
}

// RunBackend is the conformance suite for stateless execution. Every
// backend plugin, ours or a third party's, is expected to pass it.
func RunBackend(t *testing.T, b backend.Backend, s Snippets) {
	ctx := context.Background()
	exec := func(t *testing.T, code string, timeout time.Duration) backend.ExecuteResult {
		t.Helper()
		res, err := b.Execute(ctx, backend.ExecuteRequest{Code: code, Language: s.Language, Timeout: timeout, MaxOutputBytes: 1 << 20})
		if err != nil {
			t.Fatalf("Execute returned a Go error for user code (failures of user code must be results): %v", err)
		}
		return res
	}
	t.Run("capabilities", func(t *testing.T) {
		c, err := b.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range c.Languages {
			found = found || l == s.Language
		}
		if !found {
			t.Fatalf("capabilities %v do not list %q", c.Languages, s.Language)
		}
	})
	t.Run("print", func(t *testing.T) {
		r := exec(t, s.Print, time.Minute)
		if !r.Success || strings.TrimRight(r.Stdout, "\n") != "hello" || r.Error != nil {
			t.Fatalf("print: %+v", r)
		}
	})
	t.Run("stderr separate", func(t *testing.T) {
		r := exec(t, s.Stderr, time.Minute)
		if !r.Success || !strings.Contains(r.Stderr, "oops") || strings.Contains(r.Stdout, "oops") {
			t.Fatalf("stderr: %+v", r)
		}
	})
	t.Run("last expression", func(t *testing.T) {
		r := exec(t, s.Expr, time.Minute)
		if !r.Success || r.ResultJSON != "42" || !strings.Contains(r.ResultRepr, "42") {
			t.Fatalf("expression: %+v", r)
		}
	})
	t.Run("syntax error", func(t *testing.T) {
		r := exec(t, s.SyntaxError, time.Minute)
		if r.Success || r.Error == nil || r.Error.Line != s.SyntaxLine {
			t.Fatalf("syntax error: want failure on line %d, got %+v", s.SyntaxLine, r.Error)
		}
	})
	t.Run("runtime error", func(t *testing.T) {
		r := exec(t, s.RuntimeError, time.Minute)
		if r.Success || r.Error == nil || r.Error.Line != s.RuntimeLine {
			t.Fatalf("runtime error: want failure on line %d, got %+v", s.RuntimeLine, r.Error)
		}
		for _, l := range r.Error.Traceback {
			if strings.Contains(l, "runner") {
				t.Errorf("traceback shows the backend's own frames: %q", l)
			}
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := exec(t, s.Sleep, 2*time.Second)
		if r.Success || r.Error == nil || r.Error.Name != "Timeout" {
			t.Fatalf("timeout: %+v", r.Error)
		}
		if time.Since(start) > 25*time.Second {
			t.Fatalf("timeout took %s", time.Since(start))
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := b.Execute(ctx, backend.ExecuteRequest{Code: s.Expr, Language: s.Language, Timeout: time.Minute})
				if err != nil || r.ResultJSON != "42" {
					errs <- err.Error()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	})
}
