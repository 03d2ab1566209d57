package backend

import (
	"context"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// OpenSessionRequest starts a stateful session.
type OpenSessionRequest struct {
	SessionID string
	Image     string
	Memory    string
	Env       map[string]string
	// ToolsGrant: as ExecuteRequest.ToolsGrant, for the session's
	// container (later executes extend the same grant).
	ToolsGrant string
	// WorkspaceID is set when the session already has a workspace (its
	// kernel is being restarted): start a kernel for SessionID, which
	// mounts that workspace, never a pre-started one.
	WorkspaceID string
	// NetworkGrant: as ExecuteRequest.NetworkGrant, for the session's
	// container; never a pre-started one.
	NetworkGrant string
	// Resume is set when the session's kernel already runs, in
	// ResumeContainer (a container the core made this plugin's again, e.g.
	// after the replica of the core that opened it was lost): connect to it
	// with Resume, the SessionInfo.ResumeState returned when the session
	// was opened, and start nothing. A backend that cannot must fail, never
	// open a fresh kernel in its place.
	Resume          []byte
	ResumeContainer string
	// Restored: ResumeContainer holds a whole-sandbox copy of the container
	// Resume was written for (a snapshot the core restored, for this
	// session or a fork of it): the state's session and container differ,
	// its kernel's connection holds.
	Restored bool
	// SandboxGrant: as ExecuteRequest.SandboxGrant, for the session's
	// container; never a pre-started one but as SandboxPoolGrant allows.
	SandboxGrant string
	// SandboxPoolGrant: as ExecuteRequest.SandboxPoolGrant, for a
	// pre-started kernel's container.
	SandboxPoolGrant string
}

// SessionInfo describes an open session.
type SessionInfo struct {
	SessionID   string
	ContainerID string
	Language    string
	// WorkspaceID is the workspace (host.Intent.SessionID) the session's
	// container mounts, when it is not SessionID: a kernel pre-started under
	// a pool id and handed to this session. The core binds that workspace to
	// the session (files, checkpoints, quota), and a later container the
	// plugin creates for SessionID (a restarted kernel) mounts it too; empty
	// means SessionID.
	WorkspaceID string
	// ResumeState is what the backend needs to reach this kernel again
	// without starting it (OpenSessionRequest.Resume), e.g. its connection
	// key; the core keeps it where only the core reads it. Empty: the
	// session cannot be resumed.
	ResumeState []byte
	// Resumed: the request's Resume was honoured, this is the kernel that
	// was running.
	Resumed bool
}

// StreamEvent is output produced while a session execute runs.
type StreamEvent struct {
	Name host.Stream // host.Stdout or host.Stderr; nothing else
	Text string
}

// Variable is one name in a session's namespace.
type Variable struct {
	Name    string         `json:"name"`
	Type    string         `json:"type"`
	Size    int64          `json:"size_bytes"`        // -1 if unknown
	Repr    string         `json:"repr"`              // at most 100 characters
	Details map[string]any `json:"details,omitempty"` // shape, dtype, rows, columns, length, class, dim, ...
}

// SessionBackend is a Backend that keeps state across executes: typically
// one long-lived process (a kernel, a shell) in one container per session.
// The core owns the session's identity and lifetime; the backend owns its
// containers. sdktest.RunSessionBackend checks every rule below.
//
// Errors. A failure of the user's code (an exception, a non-zero status, a
// timeout, the session's process dying) is an ExecuteResult with Success
// false and Error set, never a Go error. Go errors are for the request or
// the machinery: an unknown session id (a *host.Error of kind
// host.KindNotFound), a host service that refused or failed, a cancelled
// context. The core shows Go errors to the agent as tool errors.
//
// Concurrency. Methods may be called concurrently for different sessions.
// The core serialises executes of one session, but a backend must still
// not corrupt a session if two calls overlap (lock per session).
type SessionBackend interface {
	Backend

	// OpenSession starts the session's process and returns once it accepts
	// code. The workspace of req.SessionID is the core's: it may already
	// hold files of an earlier incarnation of the session (after a death
	// or a restart) and the core removes it when the session is destroyed.
	// The core opens an id only while it is not open (it closes a dead
	// session before opening it again). A backend that opens
	// sessions of its own (a throw-away session for Execute) must close
	// them and call host.Sandbox.RemoveWorkspace, so that nothing of a
	// stateless run remains on the host.
	OpenSession(ctx context.Context, req OpenSessionRequest) (SessionInfo, error)

	// ExecuteInSession runs code in the session's namespace and returns the
	// whole result. emit, which may be nil, receives output while the code
	// runs: only events named "stdout" or "stderr", carrying text in the
	// order produced, at most what the result will hold; it is progress for
	// the agent, and the result stays the authority (emit may be called
	// with nothing at all). A timeout (req.Timeout) interrupts the code, as
	// Interrupt does, and returns a result with Error.Name "Timeout": the
	// session and its state stay alive. If the process does not stop, or
	// ends for any reason (OOM, exit, crash), the session is dead: the
	// result has SessionDead set and Error says why, and every later
	// ExecuteInSession returns such a result too, until the core closes
	// the session and opens it again under the same id (which it does on
	// the next request, telling the agent that state was lost).
	ExecuteInSession(ctx context.Context, req ExecuteRequest, emit func(StreamEvent)) (ExecuteResult, error)

	// Interrupt stops the code running in the session, if any, as SIGINT
	// stops a terminal program (host.SignalAll reaches a shell's children
	// as well); the session and its state survive, and the running
	// ExecuteInSession returns. Interrupting an idle session is harmless.
	Interrupt(ctx context.Context, sessionID string) error

	// Inspect lists the session's user variables without changing them. A
	// backend with no notion of variables returns an empty list.
	Inspect(ctx context.Context, sessionID string) ([]Variable, error)

	// RestartSession clears the session's state (variables, imports,
	// environment changes) and leaves a live session under the same id.
	// It may keep the container (a namespace reset) or replace it; the
	// session's files in the workspace are kept either way.
	RestartSession(ctx context.Context, sessionID string) error

	// CloseSession ends the session's process and removes its containers;
	// the workspace is left to the core. Closing an unknown or already
	// dead session is not an error, so the core can always close before
	// reopening.
	CloseSession(ctx context.Context, sessionID string) error
}
