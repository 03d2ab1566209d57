// Package apps serves MCP-Forge's MCP Apps (SEP-1865): self-contained HTML
// views, ui:// resources, that hosts rendering MCP Apps show beside the
// answer of a tool naming them (toolsets.ViewMeta). The session view shows
// a session's variables, last cells with their outputs and plots, files and
// running jobs, read through the host from the session's own mcp://
// resources: the page holds no data and reaches nothing but its host.
package apps

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
)

// MIMEType is the type of an MCP App's HTML.
const MIMEType = "text/html;profile=mcp-app"

//go:embed session.html session.css session.js
var assets embed.FS

// SessionPage is the session view as served: one HTML document whose
// style and script are inline, allowed by their hashes in its own
// Content-Security-Policy. Nothing else may load: no script or style
// injected into it (a variable's preview, an output) would run, images
// come only from data: URLs, and it may connect nowhere.
var SessionPage = page("session.html", "session.css", "session.js")

func page(html, css, js string) string {
	read := func(name string) string {
		b, err := assets.ReadFile(name)
		if err != nil {
			panic(err) // embedded: cannot be missing
		}
		return string(b)
	}
	style, script := read(css), read(js)
	csp := "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
		"; img-src data:; base-uri 'none'; form-action 'none'"
	return strings.NewReplacer("{{csp}}", csp, "{{style}}", style, "{{script}}", script).Replace(read(html))
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// uiMeta asks the host for the strictest sandbox: no origin to connect to
// or load from.
func uiMeta() mcp.Meta {
	return mcp.Meta{"ui": map[string]any{
		"csp":           map[string]any{"connectDomains": []string{}, "resourceDomains": []string{}},
		"prefersBorder": true,
	}}
}

// Toolset is the views, as resources.
func Toolset() toolsets.Toolset {
	return toolsets.Toolset{Name: "apps", Resources: []toolsets.Resource{{Def: &mcp.Resource{
		URI: toolsets.SessionViewURI, Name: "session-view", Title: "Session view", MIMEType: MIMEType, Meta: uiMeta(),
		Description: "An MCP App showing a session: its variables (type, size, shape, preview), its last cells with outputs and plots, its files and running jobs. Hosts that render MCP Apps show it beside the execute and session tools' answers.",
	}, Handler: func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: toolsets.SessionViewURI, MIMEType: MIMEType, Text: SessionPage, Meta: uiMeta()}}}, nil
	}}}}
}
