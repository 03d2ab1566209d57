package files

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Input files reach a backend that takes them; one that does not is
// refused, never run without them; bad paths and shapes are refused.
func TestInputFiles(t *testing.T) {
	var got map[string][]byte
	r := newRig(t, func(c *config.Config) { c.Execution.DefaultBackend["python"] = "snake" }, func(r *enginerig.Rig) {
		r.Snake.Caps.InputFiles = true
		r.Snake.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
			got = req.InputFiles
			return backend.ExecuteResult{Success: true}, nil
		}
		r.PM.Add("snake", r.Snake) // the status carries the capabilities
	})
	in := []engine.InputFile{{Path: "./data//a.csv", Content: "x"}, {Path: "b.bin", Content: "AAH/", Encoding: "base64"}}
	if _, err := r.Exec(t, engine.Request{Language: "python", InputFiles: in}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["data/a.csv"]) != "x" || string(got["b.bin"]) != "\x00\x01\xff" {
		t.Fatalf("the backend got %q", got)
	}
	for _, c := range []struct {
		name string
		req  engine.Request
		rule string
	}{
		{"dotdot", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "../x", Content: "x"}}}, RuleFilePath},
		{"absolute", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "/x", Content: "x"}}}, RuleFilePath},
		{"duplicate", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "a", Content: "x"}, {Path: "./a", Content: "y"}}}, RuleInputFiles},
		{"file and dir", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "a", Content: "x"}, {Path: "a/b", Content: "y"}}}, RuleInputFiles},
		{"bad base64", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "a", Content: "!!", Encoding: "base64"}}}, RuleFileEncoding},
		{"both", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "a", Content: "x", FromSession: "s"}}}, RuleInputFiles},
		{"no such session", engine.Request{Language: "python", InputFiles: []engine.InputFile{{Path: "a", FromSession: "s"}}}, session.RuleSessionNotFound},
		{"with a session", engine.Request{Language: "python", SessionID: "s", InputFiles: []engine.InputFile{{Path: "a", Content: "x"}}}, RuleInputFiles},
		{"backend without input files", engine.Request{Language: "r", InputFiles: []engine.InputFile{{Path: "a", Content: "x"}}}, RuleInputFiles},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Exec(t, c.req)
			if refusedBy(t, err) != c.rule {
				t.Fatalf("want %s, got %v", c.rule, err)
			}
			if c.rule == RuleInputFiles && c.name == "with a session" && len(r.e.Sessions("", true)) != 0 {
				t.Error("a refused call left a session behind")
			}
			if strings.Contains(err.Error(), "%!") {
				t.Errorf("bad format: %v", err)
			}
		})
	}
}
