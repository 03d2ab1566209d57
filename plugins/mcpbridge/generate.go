package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// Generated code holds third-party text (tool names, descriptions, schemas)
// only inside string literals built by pyStr and rStr, which escape every
// character outside printable ASCII, and inside comments built by
// commentLines, which has no line terminator. Identifiers come from
// mapNames, which yields [A-Za-z][A-Za-z0-9_]* only.

var (
	//go:embed gen/client.py
	pyClient string
	//go:embed gen/runtime.R
	rRuntime string
	//go:embed gen/forge-tool-call.pl
	rHelper string
)

// HelperName is R's helper under the grant directory's bin/.
const HelperName = "forge-tool-call"

func withMax(s string) string {
	return strings.ReplaceAll(s, "__MAX_MESSAGE__", strconv.Itoa(bridge.MaxWireMessage))
}

// param is one argument of a generated function.
type param struct {
	Orig     string // the schema's property name
	Ident    string // the Python and R argument name
	Type     string // JSON Schema type, "" if none or several
	Desc     string
	Enum     []any
	Required bool
}

// params reads an input schema's properties: required ones first in the
// order of "required", then the optional ones sorted by name.
func params(schema json.RawMessage) ([]param, error) {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	req := map[string]bool{}
	var names []string
	for _, r := range s.Required {
		if !req[r] {
			req[r] = true
			names = append(names, r)
		}
	}
	var opt []string
	for k := range s.Properties {
		if !req[k] {
			opt = append(opt, k)
		}
	}
	sort.Strings(opt)
	names = append(names, opt...)
	ids := mapNames(names, "p_", nil)
	out := make([]param, 0, len(names))
	for _, n := range names {
		p := param{Orig: n, Ident: ids[n], Required: req[n]}
		var prop struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		}
		if raw, ok := s.Properties[n]; ok {
			_ = json.Unmarshal(raw, &prop) // a malformed property is an untyped one
		}
		if t, ok := prop.Type.(string); ok {
			p.Type = t
		}
		p.Desc, p.Enum = prop.Description, prop.Enum
		out = append(out, p)
	}
	return out, nil
}

// pyStr is s as a Python string literal (ASCII only).
func pyStr(s string) string { return quote(s, false) }

// rStr is s as an R string literal (ASCII only; R refuses NUL in a string,
// so NUL becomes U+FFFD).
func rStr(s string) string { return quote(s, true) }

func quote(s string, r bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '"':
			b.WriteString(`\"`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c >= 0x20 && c < 0x7f:
			b.WriteRune(c)
		case r && c == 0:
			b.WriteString(`\u{fffd}`)
		case r:
			fmt.Fprintf(&b, `\U{%x}`, c)
		case c < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			fmt.Fprintf(&b, `\U%08x`, c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// commentLines is text as lines safe after a comment marker: no line
// terminator of any kind (CR, LF, NEL, LS, PS, VT, FF) and no other control
// character survives in a line.
func commentLines(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.Map(func(c rune) rune {
			if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == 0x2028 || c == 0x2029 || c == 0xfeff {
				return ' '
			}
			return c
		}, l)
		lines = append(lines, strings.TrimRight(l, " "))
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// docText is a tool's documentation: description, then parameters.
func docText(t bridge.Tool, ps []param) string {
	var b strings.Builder
	if d := strings.TrimSpace(t.Description); d != "" {
		b.WriteString(d)
	} else {
		b.WriteString("(no description)")
	}
	fmt.Fprintf(&b, "\n\nMCP tool %s", t.ID())
	if t.OriginalName != "" {
		fmt.Fprintf(&b, " (the server calls it %q)", t.OriginalName)
	}
	b.WriteString(".\n")
	if len(ps) > 0 {
		b.WriteString("\nParameters\n----------\n")
	}
	for _, p := range ps {
		typ := p.Type
		if typ == "" {
			typ = "any"
		}
		req := "optional"
		if p.Required {
			req = "required"
		}
		fmt.Fprintf(&b, "%s : %s, %s", p.Ident, typ, req)
		if p.Ident != p.Orig {
			fmt.Fprintf(&b, " (sent as %q)", p.Orig)
		}
		b.WriteByte('\n')
		if d := strings.TrimSpace(p.Desc); d != "" {
			for _, l := range strings.Split(d, "\n") {
				b.WriteString("    " + l + "\n")
			}
		}
		if len(p.Enum) > 0 {
			e, _ := json.Marshal(p.Enum)
			fmt.Fprintf(&b, "    One of: %s\n", e)
		}
	}
	return b.String()
}

var pyTypes = map[string]string{"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict", "null": "None"}

func pyType(p param) string {
	if t, ok := pyTypes[p.Type]; ok {
		return t
	}
	return "_typing.Any"
}

// generatePython writes the package forge_tools under python/.
func generatePython(tools []bridge.Tool) (map[string][]byte, error) {
	files := map[string][]byte{}
	const root = "python/forge_tools/"
	files[root+"_client.py"] = []byte(withMax(pyClient))
	byServer := map[string][]bridge.Tool{}
	var servers []string
	for _, t := range tools {
		if byServer[t.Server] == nil {
			servers = append(servers, t.Server)
		}
		byServer[t.Server] = append(byServer[t.Server], t)
	}
	sort.Strings(servers)

	var top strings.Builder
	top.WriteString(`"""MCP tools this run was granted, generated by the MCP-Forge tool bridge.

Usage: from forge_tools import SERVER; SERVER.TOOL(arg=...). A failure raises
a BridgeError subclass: ToolError (the tool's own error, with its message),
ToolDenied, ToolTimeout, ToolBudgetExceeded, ToolInvalid, ToolServerError."""

from forge_tools._client import (  # noqa: F401
    BridgeError,
    ToolBudgetExceeded,
    ToolDenied,
    ToolError,
    ToolInvalid,
    ToolServerError,
    ToolTimeout,
    call,
    call_with_images,
)
`)
	for _, srv := range servers {
		fmt.Fprintf(&top, "from forge_tools import %s  # noqa: F401\n", srv)
	}
	top.WriteString("\n__all__ = [\"BridgeError\", \"ToolBudgetExceeded\", \"ToolDenied\", \"ToolError\", \"ToolInvalid\", \"ToolServerError\", \"ToolTimeout\", \"call\", \"call_with_images\"")
	for _, srv := range servers {
		fmt.Fprintf(&top, ", %s", pyStr(srv))
	}
	top.WriteString("]\n")
	files[root+"__init__.py"] = []byte(top.String())

	for _, srv := range servers {
		var init strings.Builder
		fmt.Fprintf(&init, "%s\n\n", pyStr("Tools of MCP server "+srv+" granted to this run."))
		var names []string
		for _, t := range byServer[srv] {
			src, err := pythonTool(t)
			if err != nil {
				return nil, fmt.Errorf("tool %s: %w", t.ID(), err)
			}
			files[root+srv+"/"+t.Name+".py"] = src
			fmt.Fprintf(&init, "from forge_tools.%s.%s import %s\n", srv, t.Name, t.Name)
			names = append(names, pyStr(t.Name))
		}
		fmt.Fprintf(&init, "\n__all__ = [%s]\n", strings.Join(names, ", "))
		files[root+srv+"/__init__.py"] = []byte(init.String())
	}
	return files, nil
}

func pythonTool(t bridge.Tool) ([]byte, error) {
	ps, err := params(t.InputSchema)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", pyStr("MCP tool "+t.ID()+", generated by the MCP-Forge tool bridge."))
	b.WriteString("import typing as _typing\n\nfrom forge_tools import _client\n\n")
	fmt.Fprintf(&b, "_TOOL = %s\n", pyStr(t.ID()))
	fmt.Fprintf(&b, "_SCHEMA = _client.schema(%s)\n\n\n", pyStr(string(t.InputSchema)))
	var sig, call []string
	for _, p := range ps {
		if p.Required {
			sig = append(sig, fmt.Sprintf("%s: %s", p.Ident, pyType(p)))
		} else {
			sig = append(sig, fmt.Sprintf("%s: _typing.Optional[%s] = None", p.Ident, pyType(p)))
		}
		call = append(call, fmt.Sprintf("%s: %s", pyStr(p.Orig), p.Ident))
	}
	fmt.Fprintf(&b, "def %s(%s) -> _typing.Any:\n", t.Name, strings.Join(sig, ", "))
	fmt.Fprintf(&b, "    %s\n", pyStr(docText(t, ps)))
	fmt.Fprintf(&b, "    return _client.invoke(_TOOL, _SCHEMA, {%s})\n", strings.Join(call, ", "))
	return []byte(b.String()), nil
}

// generateR writes r/forge_tools.R (one list of functions per server,
// attached as "forge_tools"), r/profile.R, and R's socket helper.
func generateR(tools []bridge.Tool) (map[string][]byte, error) {
	byServer := map[string][]bridge.Tool{}
	var servers []string
	for _, t := range tools {
		if byServer[t.Server] == nil {
			servers = append(servers, t.Server)
		}
		byServer[t.Server] = append(byServer[t.Server], t)
	}
	sort.Strings(servers)
	var b strings.Builder
	b.WriteString(`# MCP tools this run was granted, generated by the MCP-Forge tool bridge.
# Usage: SERVER$TOOL(arg = ...). A failure is a condition of class
# forge_bridge_error and one of forge_tool_error (the tool's own error),
# forge_tool_denied, forge_tool_timeout, forge_tool_budget,
# forge_tool_invalid, forge_tool_server; conditionMessage() has the message.
local({
`)
	b.WriteString(withMax(rRuntime))
	b.WriteString("  exports <- new.env(parent = emptyenv())\n")
	for _, srv := range servers {
		fmt.Fprintf(&b, "\n  # --- MCP server %s ---\n  tools <- list()\n", srv)
		for _, t := range byServer[srv] {
			if err := rTool(&b, t); err != nil {
				return nil, fmt.Errorf("tool %s: %w", t.ID(), err)
			}
		}
		fmt.Fprintf(&b, "  assign(%s, tools, envir = exports)\n", rStr(srv))
	}
	b.WriteString(`  assign("forge_tool_call", call, envir = exports)
  if ("forge_tools" %in% search()) detach("forge_tools", character.only = TRUE)
  attach(exports, name = "forge_tools", warn.conflicts = FALSE)
})
`)
	profile := "# R_PROFILE_USER of a run granted MCP tools: defines them (see forge_tools.R).\n" +
		"local(source(file.path(dirname(Sys.getenv(\"R_PROFILE_USER\")), \"forge_tools.R\"), local = TRUE))\n"
	return map[string][]byte{
		"r/forge_tools.R":   []byte(b.String()),
		"r/profile.R":       []byte(profile),
		"bin/" + HelperName: []byte(withMax(rHelper)),
	}, nil
}

func rTool(b *strings.Builder, t bridge.Tool) error {
	ps, err := params(t.InputSchema)
	if err != nil {
		return err
	}
	b.WriteString("\n")
	for i, l := range commentLines(docText(t, ps)) {
		if i == 0 {
			fmt.Fprintf(b, "  #' %s$%s: %s\n", t.Server, t.Name, l)
			continue
		}
		fmt.Fprintln(b, strings.TrimRight("  #' "+l, " "))
	}
	for _, p := range ps {
		fmt.Fprintf(b, "  #' @param %s\n", p.Ident)
	}
	b.WriteString("  #' @return the tool's structured result, else its text\n")
	var sig, keys, vals []string
	for _, p := range ps {
		if p.Required {
			sig = append(sig, p.Ident)
			vals = append(vals, fmt.Sprintf("if (missing(%s)) NULL else %s", p.Ident, p.Ident))
		} else {
			sig = append(sig, p.Ident+" = NULL")
			vals = append(vals, p.Ident)
		}
		keys = append(keys, rStr(p.Orig))
	}
	fmt.Fprintf(b, "  tools[[%s]] <- local({\n", rStr(t.Name))
	fmt.Fprintf(b, "    tool <- %s\n    schema <- %s\n", rStr(t.ID()), rStr(string(t.InputSchema)))
	fmt.Fprintf(b, "    f <- function(%s) invoke(tool, schema, c(%s), list(%s))\n", strings.Join(sig, ", "), strings.Join(keys, ", "), strings.Join(vals, ", "))
	fmt.Fprintf(b, "    attr(f, \"doc\") <- %s\n    f\n  })\n", rStr(docText(t, ps)))
	return nil
}
