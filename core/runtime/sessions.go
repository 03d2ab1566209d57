package runtime

import (
	"context"
	"errors"
	"time"
)

// LabelRecorded marks a sandbox whose session is recorded in the runtime
// (SessionStore): another core may take it over, so the reconciliation of
// a restarted core leaves it to the one that claims it.
const LabelRecorded = "io.mcp-forge.recorded"

// SessionRecord is what another core needs to take a live session over:
// whose it is, which plugin serves it and how that plugin reaches its
// kernel again. Resume holds the kernel's key: it is kept where only the
// core can read it, never in labels, logs or audit.
type SessionRecord struct {
	Client    string            `json:"client"`
	ID        string            `json:"id"`
	Internal  string            `json:"internal"`
	Backend   string            `json:"backend"`
	Language  string            `json:"language"`
	Image     string            `json:"image,omitempty"`
	Workspace string            `json:"workspace"` // the workspace the container mounts (a pool's, when warm)
	Endpoints []SessionEndpoint `json:"endpoints,omitempty"`
	Resume    []byte            `json:"resume"`
	Created   time.Time         `json:"created"`
}

// SessionEndpoint is an endpoint the session's container declared.
type SessionEndpoint struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// ErrNoRecord: no live session of that id is recorded (never recorded, or
// its sandbox is gone with its state).
var ErrNoRecord = errors.New("no live session recorded")

// HeldError: another live core serves the session. By is its pod,
// "NAMESPACE/NAME"; "" when it is another core claiming the session at the
// same instant. The engine's refusal of a call for that session (rule
// session-held) carries it, so that the HTTP transport can pass the call
// to By (core/forward).
type HeldError struct{ By string }

func (e *HeldError) Error() string {
	if e.By == "" {
		return "the session is being claimed by another replica"
	}
	return "the session is served by another replica (" + e.By + ")"
}

// SessionStore is a runtime that keeps sessions where every core reaches
// them (Kubernetes, for a core with replicas), so that one core can take
// over a session another one opened.
type SessionStore interface {
	// RecordSession records the live session whose kernel runs in
	// container.
	RecordSession(ctx context.Context, container string, r SessionRecord) error
	// FindSession is the record of session internal and its container;
	// ErrNoRecord if there is none with a running sandbox.
	FindSession(ctx context.Context, internal string) (SessionRecord, string, error)
	// ClaimSession makes this core the one that serves the container's
	// session: *HeldError while another live core does.
	ClaimSession(ctx context.Context, container string) error
	// Holder is the other live core that serves the container's session
	// ("NAMESPACE/NAME" of its pod), "" when the session is this core's,
	// handed over, or its core is gone.
	Holder(ctx context.Context, container string) (string, error)
	// OwnsSession reports whether this core still serves the container's
	// session.
	OwnsSession(ctx context.Context, container string) (bool, error)
	// ReleaseSession hands the session over: any core may claim it now.
	ReleaseSession(ctx context.Context, container string) error
	// Forget drops what this core keeps of a container another core
	// serves now: the channels to it that are open end.
	Forget(container string)
	// ReleaseAll hands over every session recorded as this core's (its
	// predecessor's, in the same place): at start, it serves none yet.
	ReleaseAll(ctx context.Context) (int, error)
	// Successors is how many other cores could take this one's sessions
	// over when it stops.
	Successors(ctx context.Context) (int, error)
}
