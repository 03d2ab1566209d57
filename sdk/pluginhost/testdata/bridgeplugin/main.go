// A bridge plugin with one tool, echo.say, which returns its arguments: it
// shows that a bridge binary launches and answers through pluginhost.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type br struct{}

func (br) ListTools(context.Context) ([]bridge.Tool, error) {
	return []bridge.Tool{{Server: "echo", Name: "say", Description: "returns its arguments", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
}

func (br) CallTool(_ context.Context, r bridge.CallRequest) (bridge.CallResult, error) {
	if r.Server != "echo" || r.Tool != "say" {
		return bridge.CallResult{IsError: true, Message: fmt.Sprintf("no tool %s.%s", r.Server, r.Tool)}, nil
	}
	return bridge.CallResult{Structured: r.Arguments}, nil
}

func (br) Generate(_ context.Context, r bridge.GenerateRequest) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, id := range r.Tools {
		out[id+".txt"] = []byte("call " + id)
	}
	return out, nil
}

func main() {
	plugin.ServeBridge(plugin.Info{Name: "testbridge", Version: "0.3.0"}, func(host.Host, backend.Config) (bridge.Bridge, error) { return br{}, nil })
}
