package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// Snippets are the conformance programs in Python.
var Snippets = sdktest.Snippets{
	Language:     "python",
	Print:        "print('hello')",
	Expr:         "x = 41\nx + 1",
	ExprJSON:     "42",
	ExprRepr:     "42",
	OwnFrames:    []string{"runner"},
	SyntaxError:  "x = 1\ny = (\nz = 3",
	SyntaxLine:   2,
	RuntimeError: "a = 1\nb = 0\nc = a / b\n",
	RuntimeLine:  3,
	Sleep:        "import time\ntime.sleep(60)",
	Stderr:       "import sys\nprint('oops', file=sys.stderr)",
}

func localBackend(t *testing.T) backend.Backend {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	return sdktest.Serve(t, Info, New, sdktest.NewLocalHost(t.TempDir()), nil)
}

// The conformance suite in-process over gRPC with a local fake host: fast
// checks of the runner and the shims. Real Podman runs are in test/e2e.
func TestConformanceLocal(t *testing.T) {
	sdktest.RunBackend(t, localBackend(t), Snippets)
}

func TestRunnerDetails(t *testing.T) {
	b := localBackend(t)
	run := func(code string) backend.ExecuteResult {
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: code, Timeout: time.Minute, MaxOutputBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		name  string
		code  string
		check func(backend.ExecuteResult) bool
	}{
		{"non-json value is repr", "object()", func(r backend.ExecuteResult) bool {
			return r.Success && r.ResultIsRepr && strings.HasPrefix(r.ResultRepr, "<object object")
		}},
		{"dict as json", "{'a': [1, 2]}", func(r backend.ExecuteResult) bool { return r.ResultJSON == `{"a": [1, 2]}` }},
		{"none is no result", "None", func(r backend.ExecuteResult) bool { return r.Success && r.ResultJSON == "" && r.ResultRepr == "" }},
		{"statement last", "x = 1", func(r backend.ExecuteResult) bool { return r.Success && r.ResultRepr == "" }},
		{"output capped", "print('x' * 5000)", func(r backend.ExecuteResult) bool {
			return len(r.Stdout) <= 1001 && r.StdoutBytes >= 5000
		}},
		{"sys.exit(3)", "import sys\nsys.exit(3)", func(r backend.ExecuteResult) bool { return !r.Success && r.ExitCode == 3 }},
		{"sys.exit(0)", "import sys\nprint('bye')\nsys.exit(0)", func(r backend.ExecuteResult) bool { return r.Success && r.Stdout == "bye\n" }},
		{"error in function", "def f():\n    return 1/0\n\nf()", func(r backend.ExecuteResult) bool {
			return r.Error != nil && r.Error.Name == "ZeroDivisionError" && r.Error.Line == 2 &&
				strings.Contains(strings.Join(r.Error.Traceback, ""), "return 1/0")
		}},
		{"keyboard interrupt", "raise KeyboardInterrupt", func(r backend.ExecuteResult) bool { return r.Error != nil && r.Error.Name == "KeyboardInterrupt" }},
		{"unicode", "print('héllo ✓')\n'✓'", func(r backend.ExecuteResult) bool { return r.Stdout == "héllo ✓\n" && r.ResultJSON == `"\u2713"` }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := run(c.code); !c.check(r) {
				t.Fatalf("%+v (error %+v)", r, r.Error)
			}
		})
	}
}
