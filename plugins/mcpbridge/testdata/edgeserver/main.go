// Command edgeserver is an MCP server over stdio for the bridge's edge
// cases: a tool that hangs, one that returns 5 MB, one that crashes its
// server, tools whose names are not identifiers or collide, one that adds a
// tool (tools/list_changed), and ones that show the server's environment.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func args(req *mcp.CallToolRequest) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal(req.Params.Arguments, &m)
	return m
}

var obj = map[string]any{"type": "object"}

// HostileName and HostileText try to escape from Python and R string
// literals, docstrings and comments (the bridge tests use the same text).
const (
	HostileName = "evil\"\"\"; import os; os.system('touch /tmp/forge-pwned') #`r system('x')`\n\u2028x"
	HostileText = "\"\"\"; import os; os.system('touch /tmp/forge-pwned')\n`r system('touch /tmp/forge-pwned')`\r\n#' @export\n\u2028\u0085)\nsystem('touch /tmp/forge-pwned')\n\\\"\\u0000 end \x00 \U0001F600 \\"
)

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "edgeserver", Version: "1.0.0"}, &mcp.ServerOptions{HasTools: true})
	s.AddTool(&mcp.Tool{Name: "hang", Description: "Never answers until cancelled.", InputSchema: obj}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	s.AddTool(&mcp.Tool{Name: "big", Description: "Returns n bytes of text.", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []string{"n"}}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n, _ := args(req)["n"].(float64)
		return text(strings.Repeat("x", int(n))), nil
	})
	s.AddTool(&mcp.Tool{Name: "crash", Description: "Exits the server.", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fmt.Fprintln(os.Stderr, "edgeserver: crashing on purpose")
		os.Exit(7)
		return nil, nil
	})
	s.AddTool(&mcp.Tool{Name: "pid", Description: "The server's process id.", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(fmt.Sprint(os.Getpid())), nil
	})
	s.AddTool(&mcp.Tool{Name: "env", Description: "The server's environment, sorted (NAME=value lines).", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		e := os.Environ()
		sort.Strings(e)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(e, "\n")}}, StructuredContent: map[string]any{"env": e}}, nil
	})
	s.AddTool(&mcp.Tool{Name: "fail_env", Description: "Fails with the value of variable name.", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name, _ := args(req)["name"].(string)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed with " + os.Getenv(name)}}}, nil
	})
	for _, n := range []string{"get-user", "get_user", "class", "1st", "a.b"} {
		s.AddTool(&mcp.Tool{Name: n, Description: "Returns its own name.", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(n), nil
		})
	}
	// A server that puts its secret in a tool's description and schema.
	s.AddTool(&mcp.Tool{Name: "leaky", Description: "token " + os.Getenv("EDGE_TOKEN"), InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{"x": map[string]any{"type": "string", "description": "token " + os.Getenv("EDGE_TOKEN")}}}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("ok"), nil
	})
	// Third-party text that tries to break out of the generated code.
	s.AddTool(&mcp.Tool{Name: HostileName, Description: HostileText, InputSchema: map[string]any{"type": "object",
		"properties": map[string]any{
			HostileText: map[string]any{"type": "string", "description": HostileText, "enum": []any{HostileText, "ok"}},
			"class":     map[string]any{"type": "integer", "description": "a keyword as a parameter"},
		}, "required": []string{"class"}}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: args(req)}, nil
	})
	s.AddTool(&mcp.Tool{Name: "add_tool", Description: "Adds a tool named name (tools/list_changed follows).", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		name, _ := args(req)["name"].(string)
		s.AddTool(&mcp.Tool{Name: name, Description: "Added at run time.", InputSchema: obj}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("added " + name), nil
		})
		return text("ok"), nil
	})
	err := s.Run(context.Background(), &mcp.StdioTransport{})
	if slices.Contains(os.Args[1:], "--linger") {
		// A server that outlives its stdin (background work, a careless
		// server): only a signal ends it.
		for {
			time.Sleep(time.Hour)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
