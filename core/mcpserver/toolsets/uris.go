package toolsets

import (
	"net/url"
	"strconv"
	"strings"
)

// The resources the toolsets serve and name to each other, in one place.

// EnvironmentURI is the resource describing images, limits and plugins.
const EnvironmentURI = "mcp://forge/environment/info"

// ToolsURI is the resource listing the tools sandbox code may be granted.
const ToolsURI = "mcp://forge/tools/available"

// EnvironmentsURI lists the custom environments and the templates.
const EnvironmentsURI = "mcp://forge/environments/list"

// Session resource templates.
const (
	StateTemplate     = "mcp://forge/sessions/{id}/state"
	VariablesTemplate = "mcp://forge/sessions/{id}/variables"
)

// Resource templates of a session's history and notebook.
const (
	HistoryTemplate  = "mcp://forge/sessions/{id}/history"
	NotebookTemplate = "mcp://forge/sessions/{id}/notebook"
)

// NotebookURI is the resource URI of a session's notebook.
func NotebookURI(id string) string { return "mcp://forge/sessions/" + id + "/notebook" }

// FilesTemplate reads a file of a session's working directory. {+path} is
// a reserved expansion: the path keeps its slashes
// (mcp://forge/sessions/s1/files/output/result.csv); each segment is
// percent-encoded.
const FilesTemplate = "mcp://forge/sessions/{id}/files/{+path}"

// FilePartsTemplate reads part {part} of a file too large for one answer.
const FilePartsTemplate = "mcp://forge/sessions/{id}/parts/{part}/{+path}"

// FileURI is the resource URI of a session's file.
func FileURI(id, rel string) string {
	return "mcp://forge/sessions/" + id + "/files/" + escapePath(rel)
}

// FilePartURI is the resource URI of part n of a session's file.
func FilePartURI(id, rel string, n int) string {
	return "mcp://forge/sessions/" + id + "/parts/" + strconv.Itoa(n) + "/" + escapePath(rel)
}

func escapePath(rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Job resources.
const (
	JobTemplate = "mcp://forge/jobs/{id}"
	JobsURI     = "mcp://forge/jobs"
)

// JobURI is the resource URI of a job.
func JobURI(id string) string { return "mcp://forge/jobs/" + id }

// SessionOf extracts {id} from mcp://forge/sessions/{id}/<leaf>.
func SessionOf(uri, leaf string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "mcp" || u.Host != "forge" {
		return "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 3 || parts[0] != "sessions" || parts[2] != leaf || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// SessionViewURI is the MCP App (ui:// resource) that shows a session:
// its variables, last cells, files and jobs. Hosts that render MCP Apps
// show it beside the answer of every tool that names it (ViewMeta).
const SessionViewURI = "ui://forge/session"

// ViewMeta is the _meta of a tool whose answer is about one session: it
// names the session view, which reads the session's id from the tool's
// arguments (session_id, or new_session_id for a fork). Hosts without
// MCP Apps ignore it.
func ViewMeta() map[string]any {
	return map[string]any{"ui": map[string]any{"resourceUri": SessionViewURI}}
}
