package bridge

// The sandbox side of the bridge: what generated code finds in a container
// that was granted tools, and the protocol it speaks. The core serves the
// socket (it holds the policy: grants, approval, budget, timeout, audit) and
// forwards each admitted call to the bridge plugin's CallTool; the plugin's
// Generate writes the code that speaks this protocol. Both sides build on
// these names, so a third-party bridge stays compatible with the core.
//
// Layout of the grant directory, mounted read-only at SandboxDir:
//
//	bridge.sock                 the socket (SocketName), for this sandbox only
//	python/forge_tools/...      Generate's Python package (PYTHONPATH)
//	r/forge_tools.R             Generate's R code (sourced by r/profile.R)
//	r/profile.R                 R_PROFILE_USER
//	bin/...                     helpers; the core writes files under bin/ executable
//
// Protocol: newline-delimited JSON on one connection, many requests in
// flight, answered in any order, each line at most MaxWireMessage bytes:
//
//	→ {"id": 7, "tool": "server.tool", "arguments": {...}}
//	← {"id": 7, "result": <structuredContent, else the text as a JSON string>,
//	   "images": ["/forge/out/tool-7-1.png"]}
//	← {"id": 7, "error": {"kind": "denied", "message": "..."}}
//
// Error kinds are the WireError* constants. A line that is not JSON, or is
// too long, ends the connection after an error with id 0.
const (
	SandboxDir     = "/forge/tools"
	SocketName     = "bridge.sock"
	MaxWireMessage = 8 << 20

	// Environment of a container with a grant.
	EnvSocket        = "FORGE_TOOLS_SOCKET" // SandboxDir + "/" + SocketName
	PythonDir        = SandboxDir + "/python"
	RProfile         = SandboxDir + "/r/profile.R"
	WireErrorDenied  = "denied"  // not granted, or policy deny, or approval refused
	WireErrorTool    = "tool"    // the tool answered with an error
	WireErrorTimeout = "timeout" // the per-call timeout passed
	WireErrorBudget  = "budget"  // the run's call budget is spent
	WireErrorInvalid = "invalid" // a malformed request or arguments
	WireErrorServer  = "server"  // the MCP server is down or failed
)

// WireRequest is one line from the sandbox.
type WireRequest struct {
	ID        int64          `json:"id"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// WireError is the error of a WireResponse.
type WireError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// WireResponse is one line to the sandbox: Result or Error.
type WireResponse struct {
	ID     int64      `json:"id"`
	Result any        `json:"result,omitempty"`
	Images []string   `json:"images,omitempty"`
	Error  *WireError `json:"error,omitempty"`
}

// LateToolsHint is what a session's code must do to see tools granted after
// its kernel started, for the languages whose startup files load the
// wrappers once ("" where they appear by themselves: Python imports the
// package when the code does).
func LateToolsHint(language string) string {
	if language == "r" {
		return `tools added to this session: run source("` + SandboxDir + `/r/forge_tools.R") to load their functions`
	}
	return ""
}
