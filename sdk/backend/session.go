package backend

import "context"

// OpenSessionRequest starts a stateful session.
type OpenSessionRequest struct {
	SessionID string
	Image     string
	Memory    string
	Env       map[string]string
}

// SessionInfo describes an open session.
type SessionInfo struct {
	SessionID   string
	ContainerID string
	Language    string
}

// StreamEvent is output produced while a session execute runs.
type StreamEvent struct {
	Name string // "stdout" or "stderr"
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

// SessionBackend is a Backend that keeps state across executes (one kernel
// in one container per session). ExecuteInSession reports output through
// emit as it happens and returns the whole result; a result with
// SessionDead set means the kernel died and its state is gone.
type SessionBackend interface {
	Backend
	OpenSession(ctx context.Context, req OpenSessionRequest) (SessionInfo, error)
	ExecuteInSession(ctx context.Context, req ExecuteRequest, emit func(StreamEvent)) (ExecuteResult, error)
	Interrupt(ctx context.Context, sessionID string) error
	Inspect(ctx context.Context, sessionID string) ([]Variable, error)
	RestartSession(ctx context.Context, sessionID string) error
	CloseSession(ctx context.Context, sessionID string) error
}
