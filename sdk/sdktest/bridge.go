package sdktest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// BridgeCases adjust the bridge conformance suite.
type BridgeCases struct {
	// Languages Generate must serve; nil: "python" and "r".
	Languages []string
	// Call is a call of a listed tool that succeeds; nil skips that check.
	Call *bridge.CallRequest
	// Grant is the tools Generate is asked for, as "server.tool"; nil: the
	// first listed tool (all but one of the tools are left ungranted when
	// there are several, so that leaks show).
	Grant []string
}

// RunBridge is the conformance suite of a bridge: its tools are listed with
// valid JSON schemas; an unknown tool or bad arguments come back as an
// error result, not a Go error; Generate writes wrappers for every granted
// tool and mentions no other. Run it against the bridge itself and against
// the client sdktest.ServeBridge or LaunchBridge returns.
func RunBridge(t *testing.T, br bridge.Bridge, c BridgeCases) {
	ctx := context.Background()
	langs := c.Languages
	if langs == nil {
		langs = []string{"python", "r"}
	}
	tools, err := br.ListTools(ctx)
	if err != nil {
		t.Fatalf("list tools: %v", err)
	}
	if len(tools) == 0 {
		t.Fatal("the bridge lists no tools")
	}

	t.Run("list-tools", func(t *testing.T) {
		seen := map[string]bool{}
		for _, tl := range tools {
			id := tl.ID()
			if tl.Server == "" || tl.Name == "" || strings.Contains(tl.Server, ".") {
				t.Errorf("tool %q: a tool needs a server (without '.') and a name", id)
			}
			if seen[id] {
				t.Errorf("tool %s is listed twice", id)
			}
			seen[id] = true
			var in map[string]any
			if err := json.Unmarshal(tl.InputSchema, &in); err != nil {
				t.Errorf("tool %s: input schema is not a JSON object: %v (%q)", id, err, tl.InputSchema)
			} else if in["type"] != "object" {
				t.Errorf("tool %s: input schema has type %v, MCP requires \"object\"", id, in["type"])
			}
			if tl.OutputSchema != nil {
				var out map[string]any
				if err := json.Unmarshal(tl.OutputSchema, &out); err != nil {
					t.Errorf("tool %s: output schema is not a JSON object: %v (%q)", id, err, tl.OutputSchema)
				}
			}
		}
	})

	t.Run("call-unknown-tool", func(t *testing.T) {
		for _, req := range []bridge.CallRequest{
			{Server: tools[0].Server, Tool: "forge-conformance-no-such-tool", Arguments: json.RawMessage(`{}`)},
			{Server: "forge-conformance-no-such-server", Tool: tools[0].Name, Arguments: json.RawMessage(`{}`)},
		} {
			res, err := br.CallTool(ctx, req)
			if err != nil {
				t.Errorf("calling unknown tool %s.%s is a Go error (%v); it must be a result with IsError", req.Server, req.Tool, err)
				continue
			}
			if !res.IsError || res.Message == "" {
				t.Errorf("calling unknown tool %s.%s: want IsError with a message, got %+v", req.Server, req.Tool, res)
			}
		}
	})

	t.Run("call-bad-arguments", func(t *testing.T) {
		res, err := br.CallTool(ctx, bridge.CallRequest{Server: tools[0].Server, Tool: tools[0].Name, Arguments: json.RawMessage(`{not json`)})
		if err != nil {
			t.Fatalf("arguments that are not JSON are a Go error (%v); they must be a result with IsError", err)
		}
		if !res.IsError || res.Message == "" {
			t.Fatalf("arguments that are not JSON: want IsError with a message, got %+v", res)
		}
	})

	t.Run("call", func(t *testing.T) {
		if c.Call == nil {
			t.Skip("BridgeCases.Call is nil")
		}
		res, err := br.CallTool(ctx, *c.Call)
		if err != nil {
			t.Fatalf("call %s.%s: %v", c.Call.Server, c.Call.Tool, err)
		}
		if res.IsError {
			t.Fatalf("call %s.%s: %s", c.Call.Server, c.Call.Tool, res.Message)
		}
		if res.Structured != nil && !json.Valid(res.Structured) {
			t.Fatalf("call %s.%s: structured result is not JSON: %q", c.Call.Server, c.Call.Tool, res.Structured)
		}
		if res.Structured == nil && res.Text == "" && len(res.Images) == 0 {
			t.Fatalf("call %s.%s: an empty result", c.Call.Server, c.Call.Tool)
		}
	})

	grant := c.Grant
	if grant == nil {
		grant = []string{tools[0].ID()}
	}
	t.Run("generate", func(t *testing.T) {
		for _, lang := range langs {
			files, err := br.Generate(ctx, bridge.GenerateRequest{Language: lang, Tools: grant})
			if err != nil {
				t.Errorf("%s: generate: %v", lang, err)
				continue
			}
			if len(files) == 0 {
				t.Errorf("%s: no files for granted tools %v", lang, grant)
			}
			var all strings.Builder
			for p, b := range files {
				if cl := filepath.Clean(p); p == "" || filepath.IsAbs(p) || cl == ".." || strings.HasPrefix(cl, "../") {
					t.Errorf("%s: file %q is not a relative path inside the wrapper directory", lang, p)
				}
				all.Write(b)
				all.WriteByte('\n')
			}
			for _, id := range grant {
				if !strings.Contains(all.String(), id) {
					t.Errorf("%s: granted tool %s is not in the generated files", lang, id)
				}
			}
			for _, tl := range tools {
				if !slices.Contains(grant, tl.ID()) && strings.Contains(all.String(), tl.ID()) {
					t.Errorf("%s: tool %s was not granted but is in the generated files", lang, tl.ID())
				}
			}
		}
	})

	t.Run("generate-refuses", func(t *testing.T) {
		if _, err := br.Generate(ctx, bridge.GenerateRequest{Language: langs[0], Tools: []string{"forge-conformance.no-such-tool"}}); err == nil {
			t.Error("generate accepted a grant of a tool the bridge does not list")
		}
		if _, err := br.Generate(ctx, bridge.GenerateRequest{Language: "forge-conformance-no-such-language", Tools: grant}); err == nil {
			t.Error("generate accepted an unknown language")
		}
	})
}
