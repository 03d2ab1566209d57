package mcpserver

import (
	"context"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// checkURIs refuses a resources/read whose URI holds invalid UTF-8 or a
// non-printable character, before any handler runs. go-sdk renders a
// not-found URI with Go's %q, whose \x escapes are not JSON: one such
// request made the reply unencodable and ended the whole connection.
func checkURIs(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.ReadResourceRequest); ok && r.Params != nil && !printable(r.Params.URI) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: "the resource URI holds a control character or invalid UTF-8; percent-encode it (RFC 3986)"}
		}
		return next(ctx, method, req)
	}
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
