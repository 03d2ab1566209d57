// A bridge plugin for the core's end-to-end tests of the tool bridge: server
// "fake" with tools add (structured), hang (never answers), image (a PNG),
// forbidden (denied by the tests' policy) and config (whether this plugin
// received the servers' env); its Generate writes a minimal Python client.
// The real bridge is plugins/mcpbridge.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type settings struct {
	Servers map[string]struct {
		Env map[string]string `json:"env"`
	} `json:"servers"`
	CallTimeout string `json:"call_timeout"`
}

type br struct{ cfg settings }

var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

func (b br) ListTools(context.Context) ([]bridge.Tool, error) {
	var out []bridge.Tool
	for _, n := range []string{"add", "hang", "image", "forbidden", "config"} {
		out = append(out, bridge.Tool{Server: "fake", Name: n, Description: "test tool " + n, InputSchema: json.RawMessage(`{"type":"object"}`)})
	}
	return out, nil
}

func (b br) CallTool(ctx context.Context, r bridge.CallRequest) (bridge.CallResult, error) {
	var args map[string]float64
	_ = json.Unmarshal(r.Arguments, &args)
	switch r.Tool {
	case "add":
		return bridge.CallResult{Structured: json.RawMessage(fmt.Sprintf(`{"sum": %v}`, args["a"]+args["b"]))}, nil
	case "hang":
		<-ctx.Done()
		return bridge.CallResult{}, ctx.Err()
	case "image":
		return bridge.CallResult{Text: "a pixel", Images: []backend.Image{{Name: "pixel", MIMEType: "image/png", Data: png}}}, nil
	case "config":
		// Echoes the secret: the core must scrub it before the sandbox sees it.
		return bridge.CallResult{Text: fmt.Sprintf("servers=%d token=%s timeout=%s", len(b.cfg.Servers), b.cfg.Servers["fake"].Env["FAKE_TOKEN"], b.cfg.CallTimeout)}, nil
	}
	return bridge.CallResult{IsError: true, Message: "no tool " + r.Tool}, nil
}

const client = `import itertools, json, os, socket

class ToolError(Exception):
    def __init__(self, kind, message):
        super().__init__(kind + ": " + message)
        self.kind = kind

_ids = itertools.count(1)
_conn = None

def call(tool, args=None):
    global _conn
    if _conn is None:
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.environ["FORGE_TOOLS_SOCKET"])
        _conn = (s, s.makefile("rb"))
    i = next(_ids)
    _conn[0].sendall((json.dumps({"id": i, "tool": tool, "arguments": args or {}}) + "\n").encode())
    r = json.loads(_conn[1].readline())
    if r.get("error"):
        raise ToolError(r["error"]["kind"], r["error"]["message"])
    if r.get("images"):
        return {"result": r.get("result"), "images": r["images"]}
    return r.get("result")
`

func (b br) Generate(_ context.Context, r bridge.GenerateRequest) (map[string][]byte, error) {
	if r.Language != "python" {
		// No R client in the test bridge: a marker shows the profile ran.
		return map[string][]byte{"r/forge_tools.R": []byte("forge_tools_granted <- c(" + quoteAll(r.Tools) + ")\n")}, nil
	}
	out := map[string][]byte{"python/forge_tools/__init__.py": []byte(client)}
	mods := map[string]*strings.Builder{}
	for _, id := range r.Tools {
		server, tool, _ := strings.Cut(id, ".")
		if mods[server] == nil {
			mods[server] = &strings.Builder{}
			mods[server].WriteString("from . import call\n")
		}
		fmt.Fprintf(mods[server], "\ndef %s(**kw):\n    return call(%q, kw)\n", tool, id)
	}
	for server, m := range mods {
		out["python/forge_tools/"+server+".py"] = []byte(m.String())
	}
	return out, nil
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

func main() {
	plugin.ServeBridge(plugin.Info{Name: "toolbridge", Version: "0.1.0"}, func(_ host.Host, cfg backend.Config) (bridge.Bridge, error) {
		var s settings
		if err := cfg.Decode(&s); err != nil {
			return nil, err
		}
		return br{cfg: s}, nil
	})
}
