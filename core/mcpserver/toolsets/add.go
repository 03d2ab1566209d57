package toolsets

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// add registers a typed tool as mcp.AddTool does, with the same
// guarantees for the caller: the arguments are checked against the tool's
// input schema (defaults applied) before h runs, a mismatch is an error
// result "validating \"arguments\": …" without structured content (which
// core/mcpserver audits), and h's output becomes the structured
// content.
//
// It costs less per call. go-sdk decodes the arguments twice and the
// output once more with a decoder that allocates and clears a 32 KiB buffer
// each time (most of a small execute's allocations, and the server's GC),
// and validates the output against the output schema. Here the arguments
// are decoded with encoding/json (the same validation, on the same values),
// and the output is not validated: it is a Go value of the type the output
// schema is inferred from (Schema), so only a programming error could
// break it, and the tests check every result against its schema
// (validatingClient, as the TypeScript SDK does).
func add[In, Out any](srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	sch, ok := t.InputSchema.(*jsonschema.Schema)
	if !ok || sch == nil || reflect.TypeFor[Out]().Kind() == reflect.Pointer {
		// Not a shape this fast path knows: go-sdk's own handling.
		mcp.AddTool(srv, t, h)
		return
	}
	in, err := sch.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", t.Name, err))
	}
	srv.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args json.RawMessage
		if req.Params != nil {
			args = req.Params.Arguments
		}
		var v In
		if err := decodeArguments(args, in, &v); err != nil {
			var res mcp.CallToolResult
			res.SetError(err)
			return &res, nil
		}
		res, out, err := h(ctx, req, v)
		if err != nil {
			if wire, ok := err.(*jsonrpc.Error); ok {
				return nil, wire
			}
			var res mcp.CallToolResult
			res.SetError(err)
			return &res, nil
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if res.InputRequests != nil {
			return res, nil // content and input requests are exclusive on the wire
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("marshaling output: %w", err)
		}
		res.StructuredContent = json.RawMessage(data)
		if res.Content == nil {
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(data)}}
		}
		return res, nil
	})
}

// decodeArguments validates raw arguments against the input schema after
// applying its defaults, then decodes the validated value into v, as
// go-sdk's typed tools do (errors read the same).
func decodeArguments(raw json.RawMessage, in *jsonschema.Resolved, v any) error {
	m := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("validating \"arguments\": unmarshaling arguments: %w", err)
		}
	}
	var value any = m
	if err := in.ApplyDefaults(&value); err != nil {
		return fmt.Errorf("validating \"arguments\": applying schema defaults:\n%w", err)
	}
	if err := in.Validate(&value); err != nil {
		return fmt.Errorf("validating \"arguments\": %v", err)
	}
	// Decoded from the validated value, not from raw: defaults count, and
	// encoding/json's case-insensitive field matching sees only the names
	// the schema allowed.
	data, err := json.Marshal(value)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	return err
}
