package engine

import (
	"context"
	"errors"

	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// The parts built on the engine (core/engine/files, core/engine/checkpoints,
// core/engine/background, core/engine/handover) use it through its
// exported methods; these are what the engine's own paths need of them in
// turn, each set once before serving (core/engine/assembly). Until then
// the engine has no files, no checkpoints, no jobs, and its sessions are
// this replica's alone.

// Files is what the execute path needs of the sessions' files
// (core/engine/files): a stateless run's input files, read and checked
// (refusals audited); the files a session run wrote to its output
// directory since before; a workspace that has just filled, audited.
type Files interface {
	Inputs(ctx context.Context, req Request, backend string) (map[string][]byte, error)
	OutputSnapshot(internal string) map[string]workspace.Stamp
	OutputFiles(internal string, before map[string]workspace.Stamp) ([]OutputFile, []string, map[string]workspace.Stamp)
	CheckFull(s *session.Session, tool string)
}

// SetFiles gives runs their input and output files through f.
func (e *Engine) SetFiles(f Files) { e.files = f }

// Checkpoints is what the session paths need of the checkpoints
// (core/engine/checkpoints): whether a new session has one to come back
// from, and bringing it back (caller holds s's lock); a destroyed
// session's removed; live sessions saved at shutdown.
type Checkpoints interface {
	Get(client, id string) (checkpoint.Meta, bool)
	Remove(client, id string) bool
	// ResumePending restores the snapshot new session s was created over,
	// before any kernel starts; ok false: there is none to restore here.
	ResumePending(ctx context.Context, s *session.Session) (notice string, ok bool)
	// RestorePending restores the checkpoint new session s was created
	// over, once its kernel is up.
	RestorePending(ctx context.Context, s *session.Session) (notice string)
	SaveAtShutdown(ctx context.Context, s *session.Session)
}

// SetCheckpoints lets sessions be saved and brought back through c.
func (e *Engine) SetCheckpoints(c Checkpoints) { e.ckpts = c }

// Replicas is what the session paths need of the replicas that may serve
// a session instead of this one (core/engine/handover): a session of
// client's id another replica opened, taken over; a kernel recorded once
// it runs; before anything touches a recorded session, that it is still
// this replica's (StillOwned, caller holding s's lock; StillServed, not);
// an idle one left alone when it is not; at a graceful stop, sessions
// handed over when another replica is there to take them.
type Replicas interface {
	Adopt(ctx context.Context, client, id, tool string) (bool, error)
	Record(ctx context.Context, s *session.Session, info backend.SessionInfo)
	StillOwned(ctx context.Context, s *session.Session, tool string) error
	StillServed(ctx context.Context, s *session.Session, tool string) error
	LostTo(ctx context.Context, s *session.Session) bool
	Successors(ctx context.Context) bool
	HandOver(ctx context.Context, s *session.Session) bool
}

// SetReplicas shares sessions with other replicas through r.
func (e *Engine) SetReplicas(r Replicas) { e.replicas = r }

// Jobs is what the engine's session paths need of the background jobs.
type Jobs interface {
	// CancelFor cancels the job holding session s, if any, with why: the
	// session is going.
	CancelFor(s *session.Session, why string)
	// Stop ends every job (the server shuts down), and the sessions they
	// held are free.
	Stop()
}

// SetJobs lets sessions be held by the background jobs j.
func (e *Engine) SetJobs(j Jobs) { e.jobs = j }

// errNoFiles refuses input files where the engine was given no files.
var errNoFiles = errors.New("this engine takes no input files")

// none is every part, absent: no files, no checkpoints, sessions of this
// replica's alone, no jobs.
type none struct{}

func (none) Inputs(_ context.Context, req Request, _ string) (map[string][]byte, error) {
	if len(req.InputFiles) > 0 {
		return nil, errNoFiles
	}
	return nil, nil
}
func (none) OutputSnapshot(string) map[string]workspace.Stamp { return nil }
func (none) OutputFiles(string, map[string]workspace.Stamp) ([]OutputFile, []string, map[string]workspace.Stamp) {
	return nil, nil, nil
}
func (none) CheckFull(*session.Session, string)                             {}
func (none) Get(string, string) (checkpoint.Meta, bool)                     { return checkpoint.Meta{}, false }
func (none) Remove(string, string) bool                                     { return false }
func (none) ResumePending(context.Context, *session.Session) (string, bool) { return "", false }
func (none) RestorePending(context.Context, *session.Session) string        { return "" }
func (none) SaveAtShutdown(context.Context, *session.Session)               {}
func (none) Adopt(context.Context, string, string, string) (bool, error)    { return false, nil }
func (none) Record(context.Context, *session.Session, backend.SessionInfo)  {}
func (none) StillOwned(context.Context, *session.Session, string) error     { return nil }
func (none) StillServed(context.Context, *session.Session, string) error    { return nil }
func (none) LostTo(context.Context, *session.Session) bool                  { return false }
func (none) Successors(context.Context) bool                                { return false }
func (none) HandOver(context.Context, *session.Session) bool                { return false }
func (none) CancelFor(*session.Session, string)                             {}
func (none) Stop()                                                          {}
