package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// fakeBridge serves three tools from memory; broken names one way to get
// the contract wrong.
type fakeBridge struct{ broken string }

func (f fakeBridge) tools() []bridge.Tool {
	obj := json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}`)
	ts := []bridge.Tool{
		{Server: "calc", Name: "add", Description: "a + b", InputSchema: obj, OutputSchema: json.RawMessage(`{"type":"object"}`)},
		{Server: "calc", Name: "mul", Description: "a * b", InputSchema: obj},
		{Server: "files", Name: "list", Description: "list files", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	if f.broken == "bad-schema" {
		ts[1].InputSchema = json.RawMessage(`{"type":`)
	}
	return ts
}

func (f fakeBridge) ListTools(context.Context) ([]bridge.Tool, error) { return f.tools(), nil }

func (f fakeBridge) CallTool(_ context.Context, r bridge.CallRequest) (bridge.CallResult, error) {
	if !slices.ContainsFunc(f.tools(), func(t bridge.Tool) bool { return t.Server == r.Server && t.Name == r.Tool }) {
		if f.broken == "unknown-is-error" {
			return bridge.CallResult{}, fmt.Errorf("no tool %s.%s", r.Server, r.Tool)
		}
		return bridge.CallResult{IsError: true, Message: fmt.Sprintf("no tool %s.%s: see the tool list", r.Server, r.Tool)}, nil
	}
	var args struct{ A, B float64 }
	if err := json.Unmarshal(r.Arguments, &args); err != nil {
		return bridge.CallResult{IsError: true, Message: "arguments: " + err.Error()}, nil
	}
	switch r.Tool {
	case "add":
		return bridge.CallResult{Structured: json.RawMessage(fmt.Sprintf(`{"sum":%g}`, args.A+args.B)), Text: fmt.Sprint(args.A + args.B)}, nil
	case "mul":
		return bridge.CallResult{Text: fmt.Sprint(args.A * args.B)}, nil
	}
	return bridge.CallResult{Text: "a.txt"}, nil
}

func (f fakeBridge) Generate(_ context.Context, r bridge.GenerateRequest) (map[string][]byte, error) {
	var ext, def string
	switch r.Language {
	case "python":
		ext, def = "py", "def %s(**kwargs):\n    return _call(%q, kwargs)\n"
	case "r":
		ext, def = "R", "%s <- function(...) .call(%q, list(...))\n"
	default:
		return nil, fmt.Errorf("language %q: this bridge generates python and r", r.Language)
	}
	grant := r.Tools
	if f.broken == "leaks-ungranted" {
		grant = nil
		for _, t := range f.tools() {
			grant = append(grant, t.ID())
		}
	}
	var b strings.Builder
	for _, id := range grant {
		if !slices.ContainsFunc(f.tools(), func(t bridge.Tool) bool { return t.ID() == id }) {
			return nil, fmt.Errorf("tool %s is not served by this bridge", id)
		}
		if f.broken == "misses-granted" {
			continue
		}
		fmt.Fprintf(&b, def, strings.ReplaceAll(id, ".", "_"), id)
	}
	return map[string][]byte{"forge_tools." + ext: []byte(b.String())}, nil
}

var fakeCall = &bridge.CallRequest{Server: "calc", Tool: "add", Arguments: json.RawMessage(`{"a":2,"b":3}`)}

func TestBridgeConformanceFake(t *testing.T) {
	RunBridge(t, fakeBridge{}, BridgeCases{Call: fakeCall})
}

// The same bridge through the real shims.
func TestBridgeConformanceOverGRPC(t *testing.T) {
	br := ServeBridge(t, plugin.Info{Name: "fakebridge", Version: "0.1.0"},
		func(host.Host, backend.Config) (bridge.Bridge, error) { return fakeBridge{}, nil }, NewLocalHost(t.TempDir()), nil)
	RunBridge(t, br, BridgeCases{Call: fakeCall, Grant: []string{"calc.add", "files.list"}})
	res, err := br.CallTool(context.Background(), *fakeCall)
	if err != nil || string(res.Structured) != `{"sum":5}` || res.Text != "5" {
		t.Fatalf("call round trip: %+v %v", res, err)
	}
}

func TestHelperBrokenBridge(t *testing.T) {
	broken := os.Getenv("SDKTEST_BROKEN_BRIDGE")
	if broken == "" {
		t.Skip("run by TestBridgeSuiteFailsBrokenBridges")
	}
	RunBridge(t, fakeBridge{broken: broken}, BridgeCases{Call: fakeCall})
}

// Each way of breaking the contract fails the subtest that guards it.
func TestBridgeSuiteFailsBrokenBridges(t *testing.T) {
	cases := []struct{ broken, subtest, says string }{
		{"bad-schema", "list-tools", "input schema is not a JSON object"},
		{"unknown-is-error", "call-unknown-tool", "is a Go error"},
		{"leaks-ungranted", "generate", "was not granted but is in the generated files"},
		{"misses-granted", "generate", "is not in the generated files"},
	}
	for _, c := range cases {
		t.Run(c.broken, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBrokenBridge$", "-test.v")
			cmd.Env = append(os.Environ(), "SDKTEST_BROKEN_BRIDGE="+c.broken)
			out, err := cmd.CombinedOutput()
			s := string(out)
			if err == nil {
				t.Fatalf("the suite passed a bridge with %s:\n%s", c.broken, s)
			}
			if !strings.Contains(s, "--- FAIL: TestHelperBrokenBridge/"+c.subtest) || !strings.Contains(s, c.says) {
				t.Fatalf("want subtest %s to fail saying %q:\n%s", c.subtest, c.says, s)
			}
		})
	}
}

type imageBridge struct{ fakeBridge }

func (imageBridge) CallTool(context.Context, bridge.CallRequest) (bridge.CallResult, error) {
	return bridge.CallResult{Text: "plot", Images: []backend.Image{{Name: "fake.png", MIMEType: "image/png", Data: []byte("<script>not a png</script>")}}}, nil
}

// An image from a bridge passes the same check as a backend's on the
// core's side: one that is not what it claims never reaches a client.
func TestBridgeImagesChecked(t *testing.T) {
	br := ServeBridge(t, plugin.Info{Name: "imagebridge", Version: "0.1.0"},
		func(host.Host, backend.Config) (bridge.Bridge, error) { return imageBridge{}, nil }, NewLocalHost(t.TempDir()), nil)
	res, err := br.CallTool(context.Background(), bridge.CallRequest{Server: "calc", Tool: "add"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 0 || !strings.Contains(res.Text, "image fake.png was not returned") {
		t.Fatalf("a fake PNG passed: %+v", res)
	}
}
