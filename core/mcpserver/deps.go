package mcpserver

import (
	"context"
	"time"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/route"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// What the MCP layer needs of the core, each where its tools use it. The
// engine is all of them (deps_test.go checks it); a test, or a server whose
// sessions live elsewhere, can give each its own.

// Executor runs the execute_<language> tools and says what they offer.
type Executor interface {
	Execute(ctx context.Context, req engine.Request, emit func(backend.StreamEvent)) (engine.Result, error)
	Languages() []route.Language
	LanguageName(language string) string
	// RefuseArguments audits a call whose arguments did not match its tool's schema.
	RefuseArguments(client, tool, msg string)
}

// Sessions is what the session tools and resources need.
type Sessions interface {
	View(ctx context.Context, client, id string, refresh bool) (session.View, error)
	DocumentState(ctx context.Context, client, id string, vars map[string]string, note *string, clear bool) (session.View, error)
	RestartSession(ctx context.Context, client, id string) (session.View, error)
	DestroySession(ctx context.Context, client, id string) error
	Sessions(client string, all bool) []session.View
	SessionStartStats() map[string]session.Starts
}

// Files is what the file tools and the file resource need.
type Files interface {
	UploadFile(client, id, rel, content, encoding string) (engine.FileInfo, error)
	ReadFile(client, id, rel, tool string) (engine.FileInfo, error)
	ReadFileFrom(client, id, rel, tool string, offset int64) (engine.FileInfo, error)
	ListFiles(client, id, dir string) ([]workspace.Entry, bool, error)
	MaxFileSize() int64
	InlineFileSize() int64
}

// Checkpoints is what checkpoint_session, restore_session and the
// listings of checkpoints need.
type Checkpoints interface {
	CheckpointSession(ctx context.Context, client, id string) (checkpoint.Meta, error)
	RestoreSession(ctx context.Context, client, id string) (checkpoint.Meta, session.View, error)
	Checkpoints(client string) []checkpoint.Meta
}

// Notebooks is what fork_session, export_notebook and the history and
// notebook resources need (notebook.go).
type Notebooks interface {
	ForkSession(ctx context.Context, client, from, to string) (engine.ForkInfo, error)
	History(client, id, tool string) (session.History, session.View, error)
	ExportNotebook(client, id, tool string) (engine.Notebook, error)
}

// Inventory is what the resources describe of what is loaded: the plugins,
// their warm pools and the tool bridge.
type Inventory interface {
	PluginStatuses() []plugins.Status
	WarmPool(ctx context.Context, st plugins.Status) *backend.WarmPool
	Tools() (*toolbridge.Service, string)
}

// Engine is every part of the core the MCP layer uses.
type Engine interface {
	Executor
	Sessions
	Files
	Checkpoints
	Notebooks
	Jobs
	Inventory
}

// SessionView is what tools and resources show of a session. Only the id
// is always present: the rest is omitted when empty, so that an error
// result (which knows only the id) has the same shape.
type SessionView struct {
	ID                   string             `json:"session_id" jsonschema:"the session id"`
	Language             string             `json:"language,omitempty" jsonschema:"the language the session runs"`
	Backend              string             `json:"backend,omitempty" jsonschema:"the backend plugin that keeps the session"`
	State                string             `json:"state,omitempty" jsonschema:"starting, idle, busy or dead (a dead session is restarted by the next call)"`
	Created              time.Time          `json:"created,omitzero"`
	LastActivity         time.Time          `json:"last_activity,omitzero"`
	Executions           int                `json:"executions,omitempty"`
	Job                  string             `json:"job_id,omitempty" jsonschema:"the background job running in the session: other calls in it are refused until it ends"`
	LostReason           string             `json:"lost_reason,omitempty" jsonschema:"why the kernel died, for a dead session"`
	Note                 string             `json:"note,omitempty"`
	Documented           map[string]string  `json:"documented_variables,omitempty" jsonschema:"variable name → its documentation"`
	DocumentationUpdated time.Time          `json:"documentation_updated,omitzero"`
	Variables            []backend.Variable `json:"variables,omitempty" jsonschema:"the session's variables at the last introspection"`
	IntrospectedAt       time.Time          `json:"introspected_at,omitzero"`
	IntrospectionError   string             `json:"introspection_error,omitempty"`
	Undocumented         []string           `json:"undocumented,omitempty" jsonschema:"variables without documentation"`
}

func sessionViews(vs []session.View) []SessionView {
	out := make([]SessionView, len(vs))
	for i, v := range vs {
		out[i] = SessionView(v)
	}
	return out
}

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	SessionID string            `json:"session_id"`
	Language  string            `json:"language,omitempty"`
	Backend   string            `json:"backend,omitempty"`
	Created   time.Time         `json:"created,omitzero"`
	Saved     []string          `json:"saved,omitempty" jsonschema:"variables saved"`
	Skipped   map[string]string `json:"skipped,omitempty" jsonschema:"variables that could not be saved → why"`
	FilesLeft []string          `json:"files_left_out,omitempty" jsonschema:"entries of the working directory not saved (links, pipes)"`
	Bytes     int64             `json:"bytes,omitempty" jsonschema:"size of the checkpoint (namespace and files)"`
	Client    string            `json:"-"`
}

func checkpointInfos(ms []checkpoint.Meta) []CheckpointInfo {
	out := make([]CheckpointInfo, len(ms))
	for i, m := range ms {
		out[i] = CheckpointInfo(m)
	}
	return out
}

// sessionStarts counts how one backend's kernels were started: taken warm
// from its pool or started cold, and how long the last of each took.
type sessionStarts struct {
	Warm       int     `json:"warm_starts"`
	Cold       int     `json:"cold_starts"`
	LastWarmMS float64 `json:"last_warm_start_ms,omitempty"`
	LastColdMS float64 `json:"last_cold_start_ms,omitempty"`
}

func startStats(m map[string]session.Starts) map[string]sessionStarts {
	out := make(map[string]sessionStarts, len(m))
	for k, v := range m {
		out[k] = sessionStarts(v)
	}
	return out
}
