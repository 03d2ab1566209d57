package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/assembly"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.golden.json from the current tools/list")

// fixture is what the built-in plugins report with the default
// configuration. The end-to-end test compares the real server's tools/list
// with the same golden file, so this cannot drift from the plugins.
func fixture() (*enginetest.Plugins, map[string]*enginetest.Backend) {
	py := backend.Capabilities{Languages: []string{"python"}, RichOutput: true, LanguageName: "Python", LanguageVersion: "3.11.2",
		Image: "mcp-forge/python:3.11", DefaultImage: "mcp-forge/python:3.11"}
	r := backend.Capabilities{Languages: []string{"r"}, RichOutput: true, LanguageName: "R", LanguageVersion: "4.2.2",
		Image: "mcp-forge/r:4.2", DefaultImage: "mcp-forge/r:4.2"}
	b := map[string]*enginetest.Backend{
		"python": {Caps: py}, "jupyter": {Caps: py}, "r": {Caps: r}, "irkernel": {Caps: r},
	}
	b["python"].Caps.Packages = []string{"numpy 1.24.2", "pandas 1.5.3", "matplotlib 3.6.3"}
	b["python"].Caps.Description = "Each call runs in a fresh container: every statement runs and the value of a final expression is the result. " +
		"Image files (png, jpeg, svg, gif) written to the working directory and open matplotlib figures come back as images. Errors give the line of your code."
	b["jupyter"].Caps.Stateful, b["jupyter"].Caps.Interrupt = true, true
	b["jupyter"].Caps.Packages = []string{"numpy 1.24.2", "pandas 1.5.3", "matplotlib 3.6.3", "ipykernel 6.17.0"}
	b["jupyter"].Caps.Description = "One IPython kernel per session keeps variables and imports across calls; the value of a final expression is the result " +
		"and matplotlib figures come back as images. A timeout interrupts the kernel and keeps its state."
	b["r"].Caps.Packages = []string{"jsonlite 1.8.4"}
	b["r"].Caps.Description = "Each call runs in a fresh container like Rscript: top-level expressions run in order and the value of the last one is the result " +
		"(JSON for simple vectors and lists). Errors give the R message and the line; plots come back as PNG images."
	b["irkernel"].Caps.Stateful, b["irkernel"].Caps.Interrupt = true, true
	b["irkernel"].Caps.Packages = []string{"jsonlite 1.8.4", "IRkernel 1.3.2"}
	b["irkernel"].Caps.Description = "One R kernel (IRkernel) per session keeps the workspace across calls; the value of the last expression is the result " +
		"and plots come back as PNG images. A timeout interrupts R and keeps its state."
	pm := enginetest.NewPlugins()
	for name, be := range b {
		pm.Add(name, be)
	}
	return pm, b
}

type rig struct {
	srv      *Server
	backends map[string]*enginetest.Backend
	audit    func() []auditEntry
}

type auditEntry = struct {
	Event, Severity string
	Details         map[string]any
}

func newRig(t *testing.T) *rig {
	t.Helper()
	pm, backends := fixture()
	r := newServer(t, pm, nil)
	r.backends = backends
	return r
}

func newServer(t *testing.T, pm *enginetest.Plugins, mutate func(*config.Config)) *rig {
	t.Helper()
	cfg := config.Default()
	cfg.Volumes.BasePath = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	rec, read := enginetest.Audit(t)
	eng, err := assembly.New(cfg, policy.New(policy.FromConfig(cfg), nil), pm, workspace.New(cfg.Volumes.BasePath, "t", 0, nil), rec, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{srv: New(eng, cfg, hclog.NewNullLogger())}
	r.audit = func() []auditEntry {
		var out []auditEntry
		for _, e := range read() {
			out = append(out, auditEntry{e.Event, e.Severity, e.Details})
		}
		return out
	}
	return r
}

// connect attaches a client over in-memory transports.
func (r *rig) connect(t *testing.T, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := r.srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// validatingClient checks every structured result against the tool's
// output schema, as the TypeScript SDK does.
type validatingClient struct {
	cs      *mcp.ClientSession
	schemas map[string]*jsonschema.Resolved
}

func (r *rig) client(t *testing.T) *validatingClient {
	t.Helper()
	cs := r.connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	vc := &validatingClient{cs: cs, schemas: map[string]*jsonschema.Resolved{}}
	for _, tool := range tools.Tools {
		var s jsonschema.Schema
		raw, _ := json.Marshal(tool.OutputSchema)
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		res, err := s.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		vc.schemas[tool.Name] = res
	}
	return vc
}

// call runs a tool, validates its structured content and decodes it.
func (vc *validatingClient) call(t *testing.T, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := vc.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error (a tool failure must be a result): %v", name, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var v any
	json.Unmarshal(raw, &v)
	if err := vc.schemas[name].Validate(v); err != nil {
		t.Fatalf("%s: structured content %s does not match the output schema: %v", name, raw, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// The tools/list answer is a contract: any change to a schema or a
// description must be deliberate (go test -run Golden -update).
func TestToolsGolden(t *testing.T) {
	cs := newRig(t).connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := canonical(tools.Tools)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "tools.golden.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("tools/list differs from %s; if the change is deliberate, run go test ./core/mcpserver -run Golden -update\n%s", path, got)
	}
}

// Every property of every schema has exactly one type: the dialects that
// clients map tool schemas to (OpenAPI subsets) have no type unions.
func TestSchemasArePortable(t *testing.T) {
	cs := newRig(t).connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(tool, path string, s map[string]any)
	walk = func(tool, path string, s map[string]any) {
		if typ, ok := s["type"].(string); !ok || typ == "null" {
			t.Errorf("%s %s: type %v", tool, path, s["type"])
		}
		props, _ := s["properties"].(map[string]any)
		for name, p := range props {
			walk(tool, path+"."+name, p.(map[string]any))
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(tool, path+"[]", items)
		}
	}
	for _, tool := range tools.Tools {
		for kind, sch := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			raw, _ := json.Marshal(sch)
			var m map[string]any
			json.Unmarshal(raw, &m)
			if m == nil {
				t.Errorf("%s has no %s schema", tool.Name, kind)
				continue
			}
			walk(tool.Name, kind, m)
		}
	}
}

// A backend for a language the core has never heard of gets its tool,
// described from what it reports; nothing about other languages is listed.
func TestToolsComeFromCapabilities(t *testing.T) {
	b := enginetest.Stateless("bf")
	b.Caps.LanguageName, b.Caps.LanguageVersion, b.Caps.Packages, b.Caps.Description = "Brainfuck", "1.0", []string{"tape 30000"}, "Runs on a tape."
	cs := newServer(t, enginetest.NewPlugins().Add("brainy", b), nil).connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var desc string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Name == "execute_bf" {
			desc = tool.Description
		}
	}
	if strings.Join(names, ",") != "build_environment,cancel_job,checkpoint_session,delete_environment,destroy_session,document_state,download_file,execute_bf,export_notebook,fork_session,list_environments,list_files,list_jobs,list_sessions,restart_session,restore_session,upload_file,wait_job" {
		t.Fatalf("%v", names)
	}
	for _, want := range []string{"Run Brainfuck code", "the brainy backend runs Brainfuck 1.0 in image mcp-forge/custom:bf with tape 30000. Runs on a tape.",
		"With session_id (state kept across calls): unavailable: session_id needs a backend that keeps Brainfuck sessions"} {
		if !strings.Contains(desc, want) {
			t.Errorf("description lacks %q:\n%s", want, desc)
		}
	}
	init := cs.InitializeResult().Instructions
	if !strings.Contains(init, "execute_bf (Brainfuck 1.0)") || strings.Contains(init, "session_id") || strings.Contains(strings.ToLower(init), "python") {
		t.Fatalf("instructions: %s", init)
	}
}

func canonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(x, "", "  ")
	return append(out, '\n'), err
}
