// Package backend is the interface a language backend plugin implements.
// Write a type that satisfies Backend and serve it with plugin.ServeBackend;
// protobuf never appears in your code.
package backend

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Capabilities say what a backend can do; the core refuses requests for
// features no loaded backend serves.
type Capabilities struct {
	Languages  []string
	Stateful   bool
	Interrupt  bool
	RichOutput bool
	MCPTools   bool
}

// ExecuteRequest is one run of user code.
type ExecuteRequest struct {
	Code           string
	Language       string
	Image          string // "": the backend's default
	Timeout        time.Duration
	Memory         string
	Env            map[string]string
	MaxOutputBytes int64
	MaxImageBytes  int64
	SessionID      string
	RunID          string
}

// ExecError describes a failure of the user's code.
type ExecError struct {
	Name      string // "SyntaxError", "ZeroDivisionError", "Timeout", "OutOfMemory", ...
	Message   string
	Traceback []string
	Line      int // 1-based line in the user's code; 0 if unknown
	Column    int
}

// Image is an image file produced by the run.
type Image struct {
	Name     string
	MIMEType string
	Data     []byte
}

// ExecuteResult is the outcome of a run. A failure of the user's code is a
// result with Success false and Error set, not a Go error: Go errors are for
// failures of the backend or the host.
type ExecuteResult struct {
	Success      bool
	Stdout       string
	Stderr       string
	StdoutBytes  int64
	StderrBytes  int64
	ResultJSON   string
	ResultRepr   string
	ResultIsRepr bool
	Error        *ExecError
	ExitCode     int
	Duration     time.Duration
	Images       []Image
	Notices      []string
	Rich         map[string]string
	SessionDead  bool // the session's kernel died during the run
}

// Backend runs code.
type Backend interface {
	Capabilities(ctx context.Context) (Capabilities, error)
	Execute(ctx context.Context, req ExecuteRequest) (ExecuteResult, error)
}

// Config is the plugin's configuration: [plugins.NAME.config] from
// forge.toml merged over settings the core provides (images, limits).
type Config json.RawMessage

// Decode unmarshals the configuration into v.
func (c Config) Decode(v any) error {
	if len(c) == 0 {
		return nil
	}
	return json.Unmarshal(c, v)
}

// Factory builds a backend once the host services are connected.
type Factory func(h host.Host, cfg Config) (Backend, error)
