// Package host is what a plugin can ask of the MCP-Forge core: sandbox
// containers and audit records. The core serves these over the go-plugin
// GRPCBroker, bound to the calling plugin, so a plugin can only touch the
// containers it created and can never ask for privileges or host paths.
package host

import (
	"context"
	"fmt"
	"net"
	"regexp"
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
	WorkDir   string        // in the container; "": the image's
	Timeout   time.Duration // 0: the configured default
	Memory    string        // "512m"; "": the configured default
	CPUQuota  int64
	Pids      int64
	SessionID string // "": an ephemeral workspace removed with the container
	Mounts    []Mount
	Files     map[string][]byte // written into the workspace before create (relative paths)
	Labels    map[string]string
	CodeHash  string // sha256 of the user's code, for the audit log
	// ToolsGrant is the token of ExecuteRequest.ToolsGrant or
	// OpenSessionRequest.ToolsGrant: the core mounts that grant's tools
	// directory read-only at bridge.SandboxDir and sets its environment.
	// Only a grant issued to this plugin is accepted.
	ToolsGrant string
	// NetworkGrant is the token of ExecuteRequest.NetworkGrant: the core
	// mounts the run's channel to its egress proxy, sets HTTP_PROXY and
	// the like, and starts the in-sandbox forwarder before Command. Only a
	// grant issued to this plugin is accepted.
	NetworkGrant string
	// SandboxGrant is the token of ExecuteRequest.SandboxGrant or
	// OpenSessionRequest.SandboxGrant: the core mounts the host roots it
	// grants read-only at RootsDir/<name>. Only a grant issued to this
	// plugin is accepted.
	SandboxGrant string
	// Endpoints are the unix sockets the container will listen on, which
	// the plugin reaches through Sandbox.Dial.
	Endpoints []Endpoint
	// WarmUp: the container starts with a CPU allowance beyond its limits
	// (the host's cores), so a pooled runner or kernel warms up fast, and
	// is held to its limits from Sandbox.Clamp on. The core clamps it
	// anyway WarmUpLimit after its creation. A runtime that cannot change
	// limits live ignores it: the container has its limits from the start.
	// No user code may reach the container before Clamp returns.
	WarmUp bool
}

// WarmUpLimit is how long after its creation a WarmUp container keeps its
// larger allowance at most: then the core clamps it, Clamp or not.
const WarmUpLimit = 30 * time.Second

// RootsDir is where the host roots of Intent.SandboxGrant appear in the
// container, each at RootsDir/<name>, read-only.
const RootsDir = "/mnt"

// Endpoint is a unix socket a sandbox listens on, reached only through Dial.
type Endpoint struct {
	Name string // short identifier, EndpointName; what Dial names
	// Path is the absolute path of the socket in the container, beneath
	// the target of one of the intent's writable Mounts.
	Path string
}

// EndpointName is what an Endpoint's Name must match.
var EndpointName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// LabelRun is the Intent.Labels key naming the run a stateless container
// serves (ExecuteRequest.RunID), so that the core's audit log attributes
// the container to it.
const LabelRun = "run"

// Container is a created container. Its workspace is reached through
// PutFile, GetFile, ReadFiles and Dial: no host path crosses the API.
type Container struct {
	ID string
}

// DialChunk is the most a Dial connection carries in one message either
// way: far under any message limit, large enough that a kernel's replies
// cross in one or two.
const DialChunk = 32 << 10

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

// ExecRequest is a command run in a running container, as the container's
// user, in its namespaces and under its limits.
type ExecRequest struct {
	Command []string
	Stdin   []byte            // fed to the command, then closed; nil: no stdin; at most MaxFileBytes
	Env     map[string]string // added to the container's environment
	WorkDir string            // "": the container's working directory
	// Timeout bounds the command: past it the command's process group gets
	// SIGTERM, then SIGKILL 2 s later, and the result has TimedOut set. The
	// core does it: the image needs no timeout(1). 0: no bound but the
	// context.
	Timeout time.Duration
	// MaxBytes caps each stream kept in the result (0 or more than
	// MaxExecOutputBytes: MaxExecOutputBytes); Output still sees everything.
	MaxBytes int64
	// Output, if set, receives stdout ("stdout") and stderr ("stderr") as
	// the command produces them, uncapped, before Exec returns. It is called
	// from one goroutine at a time.
	Output func(stream Stream, data []byte)
}

// ExecResult is the outcome of a command run in a running container.
type ExecResult struct {
	ExitCode int
	TimedOut bool
	Output
}

// SignalScope says which processes of a container a signal reaches.
type SignalScope int

// Signal scopes.
const (
	// SignalInit reaches the container's init process only (catatonit, which
	// forwards it to its child, the container's command). Processes that
	// command started are not signalled unless it passes the signal on.
	SignalInit SignalScope = iota
	// SignalAll reaches every process of the container's user (kill -SIG -1
	// run inside the container as that user), except init: a shell and the
	// program it waits for are both interrupted.
	SignalAll
)

// Size caps of what crosses the plugin connection in one message (gRPC's
// default message limit is 4 MiB).
const (
	MaxFileBytes       = 3 << 20 // one file of PutFile or GetFile, or Exec's stdin
	MaxExecOutputBytes = 1 << 20 // each of stdout and stderr kept in an ExecResult
)

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
	// Exec runs a command in a running container. A non-zero exit or a
	// timeout is a result, not an error.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// Signal sends signal (one of Signals) to the processes scope names.
	Signal(ctx context.Context, id string, signal Signal, scope SignalScope) error
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove removes the container; an ephemeral workspace goes with it, a
	// session's stays until RemoveWorkspace.
	Remove(ctx context.Context, id string) error
	ReadFiles(ctx context.Context, id, subdir string, maxFile, maxTotal int64) ([]File, error)
	// PutFile writes a file into the container's workspace (path relative
	// to it, at most MaxFileBytes), owned by the workspace's owner so the
	// container can change it. No link on the path is followed.
	PutFile(ctx context.Context, id, path string, data []byte) error
	// GetFile reads a regular file of the container's workspace, at most max
	// bytes (a larger file is an invalid-request error). No link on the path
	// is followed.
	GetFile(ctx context.Context, id, path string, max int64) ([]byte, error)
	// RemoveWorkspace deletes a session workspace this plugin created, once
	// none of its containers remains. A backend that opens sessions of its
	// own (a throw-away session for a stateless run) must call it, or the
	// workspace stays on the host until the server ends.
	RemoveWorkspace(ctx context.Context, sessionID string) error
	// Dial opens a byte stream to endpoint of container id (one the plugin
	// created, declared in its intent). KindNotFound: no such endpoint;
	// KindUnavailable: nothing listens there yet (retry). The connection
	// supports deadlines and half-close (CloseWrite).
	Dial(ctx context.Context, id, endpoint string) (net.Conn, error)
	// Clamp holds a container created with Intent.WarmUp to its limits;
	// when it returns nil they hold. Clamping a container created without
	// WarmUp, or again, does nothing. An error: the container could not be
	// held to its limits and was removed.
	Clamp(ctx context.Context, id string) error
	// Claim gives pooled container id, created with a standing grant
	// (backend.ExecuteRequest.SandboxPoolGrant), to the run or session
	// whose own grant is sandboxGrant, before any of its code reaches the
	// container. An error: the container may not serve it (start one with
	// sandboxGrant instead).
	Claim(ctx context.Context, id, sandboxGrant string) error
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
	KindTooLarge    Kind = "too-large" // a size limit was reached (a builder's BuildRequest.MaxBytes)
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
