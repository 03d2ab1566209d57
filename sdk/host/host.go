// Package host is what a plugin can ask of the MCP-Forge core: sandbox
// containers and audit records. The core serves these over the go-plugin
// GRPCBroker, bound to the calling plugin, so a plugin can only touch the
// containers it created and can never ask for privileges or host paths.
package host

import (
	"context"
	"fmt"
	"time"
)

// Host bundles the services the core offers a plugin.
type Host interface {
	Sandbox() Sandbox
	Audit() Audit
}

// Mount is a directory of the container's workspace mounted into it.
type Mount struct {
	Subdir   string // relative to the workspace; "" for the workspace itself
	Target   string // absolute path in the container
	ReadOnly bool
}

// Intent is everything a plugin may choose about a container.
type Intent struct {
	Image     string
	Command   []string
	Env       map[string]string
	WorkDir   string
	Timeout   time.Duration // 0: the configured default
	Memory    string        // "512m"; "": the configured default
	CPUQuota  int64
	Pids      int64
	SessionID string // "": an ephemeral workspace removed with the container
	Mounts    []Mount
	Files     map[string][]byte // written into the workspace before create
	Labels    map[string]string
	CodeHash  string // sha256 of the user's code, for the audit log
}

// Container is a created container and its workspace on the host.
type Container struct {
	ID        string
	Workspace string
}

// WaitResult is how a container ended.
type WaitResult struct {
	ExitCode  int
	TimedOut  bool
	OOMKilled bool
	Message   string // a ready sentence for TimedOut and OOMKilled
}

// State is a container's current state.
type State struct {
	Running   bool
	ExitCode  int
	OOMKilled bool
	Message   string
}

// Output is captured stdout and stderr, each capped; the totals count what
// was produced.
type Output struct {
	Stdout, Stderr           []byte
	StdoutTotal, StderrTotal int64
}

// ExecResult is the outcome of a command run in a running container.
type ExecResult struct {
	ExitCode int
	Output
}

// File is a file read back from a container's workspace.
type File struct {
	Name    string
	Data    []byte
	Size    int64
	Skipped bool // over a size cap: Data is empty
}

// Sandbox creates and operates containers on the plugin's behalf.
type Sandbox interface {
	Create(ctx context.Context, in Intent) (Container, error)
	Start(ctx context.Context, id string) error
	Wait(ctx context.Context, id string, timeout time.Duration) (WaitResult, error)
	// State reports whether the container still runs, and if not how it
	// ended, without waiting or killing.
	State(ctx context.Context, id string) (State, error)
	Logs(ctx context.Context, id string, max int64) (Output, error)
	Exec(ctx context.Context, id string, cmd []string, max int64) (ExecResult, error)
	Signal(ctx context.Context, id, signal string) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	Remove(ctx context.Context, id string) error
	ReadFiles(ctx context.Context, id, subdir string, maxFile, maxTotal int64) ([]File, error)
}

// Event is an audit record a plugin adds to the core's log.
type Event struct {
	Event     string
	Severity  string
	SessionID string
	Success   bool
	Details   map[string]any
	Error     string
}

// Audit records plugin events.
type Audit interface {
	Record(ctx context.Context, e Event) error
}

// Kind classifies an error from the host.
type Kind string

// Error kinds.
const (
	KindPolicy      Kind = "policy"      // refused by the security policy
	KindInvalid     Kind = "invalid"     // a bad request (limit above maximum, bad path)
	KindNotFound    Kind = "not-found"   // no such container or image
	KindUnavailable Kind = "unavailable" // the engine is not reachable
	KindInternal    Kind = "internal"
)

// Error is an error returned by a host service.
type Error struct {
	Kind    Kind
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf builds a host error.
func Errorf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
