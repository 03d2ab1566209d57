// Package backend is the interface a language backend plugin implements.
// Write a type that satisfies Backend and serve it with plugin.ServeBackend;
// protobuf never appears in your code.
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Capabilities say what a backend can do; the core refuses requests for
// features no loaded backend serves. A backend that is not Stateful serves
// stateless runs; a Stateful one serves sessions (and stateless runs only
// when the operator or the request names it).
//
// The descriptive fields are what the core knows of a language: it builds
// the execute_<language> tool's description, `mcp-forge images` and the
// environment resource from them, so they must hold for Image, the image in
// use — report LanguageVersion and Packages only when they describe it.
type Capabilities struct {
	Languages  []string
	Stateful   bool
	Interrupt  bool
	RichOutput bool
	MCPTools   bool

	LanguageName    string   // how the language is written in messages, e.g. "Python"; "" means the language id
	LanguageVersion string   // the language's version in Image, e.g. "3.11"; "" if unknown
	Image           string   // the image a run uses when the request names none (after the plugin's configuration)
	DefaultImage    string   // the image the plugin declares as its default
	Packages        []string // notable packages in Image, e.g. "numpy 1.24"
	Description     string   // a sentence or two for users: how code runs and what comes back

	// Checkpoint is how a Stateful backend's kernel saves and loads its
	// namespace (checkpoint_session, restore_session, sessions kept across
	// a server restart); nil: its sessions cannot be checkpointed.
	Checkpoint *Checkpoint
	// InputFiles: Execute places ExecuteRequest.InputFiles read-only in the
	// run's working directory. The core refuses input files for a backend
	// without it rather than drop them.
	InputFiles bool
	// SandboxGrants: the backend copies ExecuteRequest.SandboxGrant and
	// OpenSessionRequest.SandboxGrant into host.Intent.SandboxGrant of the
	// container that runs the code. The core refuses host roots for a
	// backend without it rather than run without them.
	SandboxGrants bool
}

// Stats is a backend's live figures. Capabilities is static and cheap (the
// core reads it once, at load); what changes from one moment to the next
// comes from StatsReporter.Stats, which the core asks again whenever it
// shows it (environment/info, metrics).
type Stats struct {
	// WarmPool is the backend's pool of ready containers, nil if it keeps
	// none.
	WarmPool *WarmPool
}

// StatsReporter is implemented by a backend that has live figures.
type StatsReporter interface {
	Stats(ctx context.Context) (Stats, error)
}

// WarmPool is the state of a pool of pre-started containers, each given to
// one run and then destroyed.
type WarmPool struct {
	Size        int            // ready containers wanted per key when the pool is quiet
	MaxSize     int            // what a key's target grows to on misses
	Target      map[string]int // ready containers wanted now, per key (grown by misses, shrunk when quiet)
	Grown       int64          // misses that grew a target
	Shrunk      int64          // quiet periods that shrank one
	MemoryCap   int64          // bytes the warm containers' memory limits may sum to; 0: none
	Warm        int            // started, ready and waiting for a run
	Starting    int            // being started
	InUse       int            // taken by a run that has not finished
	Hits        int64          // runs served by a warm container
	Misses      int64          // runs that found none for their key and ran cold
	Refills     int64          // containers started for the pool
	Failures    int64          // starts that failed
	Retired     int64          // idle containers removed unused (too old, dead)
	LastRefill  time.Duration
	MeanRefill  time.Duration
	LastFailure string
}

// Checkpoint is the code a kernel runs in a session to save or load its
// namespace. The core runs Save in an idle session; it writes the namespace
// to CheckpointFile in the working directory and prints one line:
// CheckpointMarker, the nonce, then JSON {"saved": [names], "skipped": {name:
// why}} (a CheckpointReport). The core keeps that file with a copy of the
// working directory. To restore, the core writes them back into a new
// kernel's working directory and runs Load, which reads CheckpointFile into
// the namespace and prints CheckpointMarker, the nonce and {"saved":
// [names]}. Neither may leave names behind in the user's namespace.
//
// The nonce: Save and Load must contain CheckpointNonce (in a string
// literal); before each run the core replaces every occurrence with a fresh
// random token (PrepareCheckpointCode) and accepts only the one line that
// carries it (ParseCheckpointReport). User code runs during a save (a
// value's __getstate__, an R active binding) and can print a marker line of
// its own: without the token it is ignored. The core never takes times,
// sizes or ids from the report: those it records itself.
type Checkpoint struct {
	Save, Load string
	// Missing is what the kernel says when the image lacks what Save and
	// Load need (a module), and Hint what to do about it: the core adds
	// Hint to such a failure.
	Missing, Hint string
}

// The checkpoint contract's names (see Checkpoint).
const (
	CheckpointMarker = "__FORGE_CKPT__"
	CheckpointFile   = ".forge-checkpoint"
	// CheckpointNonce is the placeholder in Save and Load that the core
	// replaces with a per-run random token (hex digits: safe in a string
	// literal of any language).
	CheckpointNonce = "__FORGE_CKPT_NONCE__"
)

// Bounds of a CheckpointReport: a report over them is refused, not cut.
const (
	MaxCheckpointNames  = 100_000
	MaxCheckpointName   = 10_000 // bytes of one variable name (R's limit of a symbol)
	MaxCheckpointReason = 4096   // bytes of one skipped variable's reason
)

// CheckpointReport is what Save (Saved and Skipped) and Load (Saved) print.
type CheckpointReport struct {
	Saved   []string          `json:"saved"`
	Skipped map[string]string `json:"skipped,omitempty"`
}

// PrepareCheckpointCode returns code (Checkpoint.Save or Load) with a fresh
// nonce in place of CheckpointNonce, and the nonce. Code without the
// placeholder is an error: its report could not be told from a line the
// user's code printed.
func PrepareCheckpointCode(code string) (string, string, error) {
	if !strings.Contains(code, CheckpointNonce) {
		return "", "", fmt.Errorf("the backend's checkpoint code does not contain the nonce placeholder %s: its report could not be told from output of the user's code (see backend.Checkpoint)", CheckpointNonce)
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	nonce := hex.EncodeToString(b)
	return strings.ReplaceAll(code, CheckpointNonce, nonce), nonce, nil
}

// ParseCheckpointReport finds the one report carrying nonce in stdout and
// checks it: exactly one such line, only the fields of CheckpointReport,
// names and reasons valid UTF-8 within the bounds above, no empty name, no
// name twice, none both saved and skipped.
func ParseCheckpointReport(stdout, nonce string) (CheckpointReport, error) {
	var rep CheckpointReport
	tag := CheckpointMarker + nonce
	if nonce == "" {
		return rep, errors.New("no nonce: prepare the code with PrepareCheckpointCode")
	}
	switch n := strings.Count(stdout, tag); {
	case n == 0:
		return rep, fmt.Errorf("the kernel did not report what it saved (stdout: %.200q)", stdout)
	case n > 1:
		return rep, fmt.Errorf("the kernel's report appears %d times: refused, something in the session printed the report's nonce", n)
	}
	rest := stdout[strings.Index(stdout, tag)+len(tag):]
	if i := strings.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	dec := json.NewDecoder(strings.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return CheckpointReport{}, fmt.Errorf("the kernel's report %.200q is not a checkpoint report: %w", rest, err)
	}
	if tail := strings.TrimSpace(rest[dec.InputOffset():]); tail != "" {
		return CheckpointReport{}, fmt.Errorf("the kernel's report is followed by %.100q on its line", tail)
	}
	if err := rep.check(); err != nil {
		return CheckpointReport{}, fmt.Errorf("the kernel's report: %w", err)
	}
	return rep, nil
}

func (r CheckpointReport) check() error {
	if len(r.Saved)+len(r.Skipped) > MaxCheckpointNames {
		return fmt.Errorf("%d names, over %d", len(r.Saved)+len(r.Skipped), MaxCheckpointNames)
	}
	seen := make(map[string]bool, len(r.Saved))
	for _, n := range r.Saved {
		if err := checkText("saved name", n, MaxCheckpointName); err != nil {
			return err
		}
		if n == "" {
			return errors.New("an empty saved name")
		}
		if seen[n] {
			return fmt.Errorf("saved name %q given twice", n)
		}
		seen[n] = true
	}
	for n, why := range r.Skipped {
		if err := checkText("skipped name", n, MaxCheckpointName); err != nil {
			return err
		}
		if n == "" {
			return errors.New("an empty skipped name")
		}
		if seen[n] {
			return fmt.Errorf("%q is both saved and skipped", n)
		}
		if err := checkText("reason of "+strconv.Quote(n), why, MaxCheckpointReason); err != nil {
			return err
		}
	}
	return nil
}

func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s of %d bytes, over %d", what, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	return nil
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
	// ToolsGrant is an opaque token of the tools (mcp_tools) granted to
	// this run; copy it into host.Intent.ToolsGrant of the container that
	// runs the code, and report Capabilities.MCPTools. "": none.
	ToolsGrant string
	// InputFiles are placed read-only in a stateless run's working
	// directory: clean relative path (no "..", not absolute) -> content.
	// Sent only to backends whose Capabilities report InputFiles.
	InputFiles map[string][]byte
	// NetworkGrant is an opaque token of the network (hosts) granted to
	// this run; copy it into host.Intent.NetworkGrant of the container
	// that runs the code, never into a pooled one. "": none.
	NetworkGrant string
	// SandboxGrant is an opaque token of the host roots (the user's
	// directories) the core mounts read-only into this run's container;
	// copy it into host.Intent.SandboxGrant of the container that runs the
	// code, never into a pooled one but as SandboxPoolGrant allows, and
	// report Capabilities.SandboxGrants. "": none.
	SandboxGrant string
	// SandboxPoolGrant is a standing grant of SandboxGrant's class (an
	// isolation its tenant requires, nothing of the run's own), the same
	// token for every request of that class: pooled containers created
	// with it (host.Intent.SandboxGrant), kept under a key of their own,
	// may serve the request once host.Sandbox.Claim gave one to
	// SandboxGrant. "": no pooled container may serve it.
	SandboxPoolGrant string
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

// StreamingBackend is implemented by a stateless backend that can report a
// run's output while it runs, as ExecuteInSession does for a session: the
// core then forwards it to the agent as progress. It is optional and found
// by a type assertion (like StatsReporter); a backend without it keeps
// working, its output coming with the result only.
//
// ExecuteStream runs req exactly as Execute does and returns the same
// result. emit, never nil, receives the program's own stdout and stderr
// text in the order produced: only events named "stdout" or "stderr",
// at most req.MaxOutputBytes in all, and not one event per write (coalesce
// them, e.g. every 100 ms, so that a program printing a million lines does
// not send a million events). It is progress for the agent: the result
// stays the authority, and emit may not be called at all.
type StreamingBackend interface {
	Backend
	ExecuteStream(ctx context.Context, req ExecuteRequest, emit func(StreamEvent)) (ExecuteResult, error)
}

// ExecuteStreaming runs req on b, with its output sent to emit while it
// runs when b is a StreamingBackend and emit is not nil, else with
// b.Execute.
func ExecuteStreaming(ctx context.Context, b Backend, req ExecuteRequest, emit func(StreamEvent)) (ExecuteResult, error) {
	if sb, ok := b.(StreamingBackend); ok && emit != nil {
		return sb.ExecuteStream(ctx, req, emit)
	}
	return b.Execute(ctx, req)
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

// Runtime is what a plugin declares about the language it runs in its
// default image (oneshot.Spec and kernel.Spec carry one).
type Runtime struct {
	LanguageName    string   // e.g. "Python"
	LanguageVersion string   // in the default image, e.g. "3.11"
	Packages        []string // notable packages in the default image, e.g. "numpy 1.24"
	Description     string   // how code runs and what comes back
}

// ImageConfig is the part of a plugin's configuration ([plugins.NAME.config])
// that chooses the image, with what the operator states about that image.
type ImageConfig struct {
	Image           string   `json:"image"`
	LanguageVersion string   `json:"language_version"`
	Packages        []string `json:"packages"`
}

// Describe fills c's descriptive fields for a backend that declares rt for
// defaultImage and is configured with ic. The declared version and packages
// hold only for defaultImage: for another image only what the operator
// configured is reported, so that no description claims what the image in
// use may not hold.
func (rt Runtime) Describe(c *Capabilities, defaultImage string, ic ImageConfig) {
	c.LanguageName, c.Description = rt.LanguageName, rt.Description
	c.Image, c.DefaultImage = ic.Image, defaultImage
	if c.Image == "" {
		c.Image = defaultImage
	}
	if c.Image == defaultImage {
		c.LanguageVersion, c.Packages = rt.LanguageVersion, rt.Packages
	}
	if ic.LanguageVersion != "" {
		c.LanguageVersion = ic.LanguageVersion
	}
	if len(ic.Packages) > 0 {
		c.Packages = ic.Packages
	}
}

// Shutdowner is implemented by a backend (or a builder, a bridge) that
// holds something worth releasing cleanly before its process ends:
// sessions whose kernels should be told to stop, a pool of ready
// containers. The core calls Shutdown (plugin API v2) when the server
// stops, with a short deadline (ctx), and then ends the process whatever
// it returned; it is never called after a crash. Without it the process
// is simply ended and the core removes what containers are left.
type Shutdowner interface {
	Shutdown(ctx context.Context) error
}
