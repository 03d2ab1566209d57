package checkpoints

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Forks: a new session (its own id, kernel, container and workspace) that
// starts with a copy of another session's variables and working directory.
// The copy is the checkpoint mechanism: the source's kernel saves its
// namespace with its files into the checkpoint store under the new id, a
// new kernel restores it as restore_session would, and the store's copy is
// removed. So a fork copies what a checkpoint saves, is bounded like one
// (volumes.session_quota, sessions.checkpoint_store_quota), and lists
// what it could not copy the same way.

// RuleForkTarget refuses a fork into an id that is taken.
const RuleForkTarget = "fork-target"

// ForkInfo describes a fork.
type ForkInfo struct {
	SessionID string            // the new session
	Source    string            // the session it was forked from
	Saved     []string          // variables copied
	Skipped   map[string]string // variables that could not be copied → why
	FilesLeft []string          // entries of the working directory not copied (links, pipes)
	NotCopied []string          // what else the fork does not have, and why
	Bytes     int64             // namespace and files copied
	Kind      string            // checkpoint.KindSnapshot: the whole sandbox was copied
	NotWhole  string            // why a gVisor session's fork copied variables only
	Duration  time.Duration
	View      session.View
}

// forkID names a fork when its client names none: the source's id (cut
// to leave room), "-fork-" and a random suffix.
func forkID(from string) string {
	suffix := "-fork-" + engine.NewID()[:6]
	if max := workspace.MaxSessionID - len(suffix); len(from) > max {
		from = from[:max]
	}
	return from + suffix
}

// ForkSession starts session to (forkID(from) when empty) with a copy of
// client's session from: its variables, working directory, documentation
// and history. The source must be live and idle; it is not changed.
func (c *Keeper) ForkSession(ctx context.Context, client, from, to string) (ForkInfo, error) {
	const tool = "fork_session"
	src, err := c.eng.Lookup(ctx, client, from, tool)
	if err != nil {
		return ForkInfo{}, err
	}
	if to == "" {
		to = forkID(from)
	}
	if err := session.CheckID(to); err != nil {
		return ForkInfo{}, c.eng.Refuse(client, to, tool, err, map[string]any{"source_session": from})
	}
	if c.checkpointCode(src.Backend) == nil {
		return ForkInfo{}, c.eng.Refuse(client, from, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "sessions of %s in backend %s cannot be forked: a fork copies variables with the backend's checkpoint code, and it reports none", c.eng.LanguageName(src.Language), src.Backend), nil)
	}
	taken := refusal.New(RuleForkTarget, "new_session_id %q is taken: you have a session or a checkpoint of that id (list_sessions shows both); choose another id, or omit new_session_id for a fresh one", to)
	if _, ok := c.Get(client, to); ok || c.sessions.Live(client, to) {
		return ForkInfo{}, c.eng.Refuse(client, to, tool, taken, map[string]any{"source_session": from})
	}
	// A busy source is refused now, not waited for: its session lock is
	// held for the whole run (up to execution.max_timeout), and the wait
	// would hold the fork's session slot, out of the caller's reach.
	if err := c.forkable(client, src); err != nil {
		return ForkInfo{}, err
	}
	started := time.Now()
	// Admitted like any new session (sessions.max_concurrent, the tenant's
	// quota) before the source's kernel is asked for anything.
	dst, created, err := c.eng.Acquire(ctx, engine.Request{Language: src.Language, SessionID: to, Client: client, CustomImage: src.Start.Image, Environment: src.Start.Env}, src.Backend, tool)
	if err != nil {
		return ForkInfo{}, c.eng.Refuse(client, to, tool, err, map[string]any{"source_session": from})
	}
	if !created {
		return ForkInfo{}, c.eng.Refuse(client, to, tool, taken, map[string]any{"source_session": from})
	}
	dst.Lock()
	defer dst.Unlock()
	dst.Pending = false // no checkpoint of its own: what it restores is the fork's copy

	src.Lock()
	if err := c.forkable(client, src); err != nil { // again: it may have changed while the lock was waited for
		src.Unlock()
		c.sessions.Drop(dst)
		return ForkInfo{}, err
	}
	saved, err := c.saveLocked(ctx, src, to, "fork into "+to)
	var docs map[string]string
	var note string
	var hist session.History
	c.sessions.Update(src, func(s *session.Session) { docs, note, hist = maps.Clone(s.Docs), s.Note, s.History.Clone() })
	var notCopied []string
	if src.Grant != nil {
		notCopied = append(notCopied, fmt.Sprintf("the MCP tools granted to %q: a fork starts without mcp_tools, and a session's tools are granted on its first call, so use a new session with mcp_tools for code that calls tools", from))
	}
	if src.Network != nil {
		notCopied = append(notCopied, fmt.Sprintf("the network granted to %q: a fork starts without network, and a session's network is granted on its first call, so use a new session with network for code that needs it", from))
	}
	src.Unlock()
	if err != nil {
		c.sessions.Drop(dst)
		return ForkInfo{}, c.eng.Refuse(client, from, tool, fmt.Errorf("fork session %q into %q: %w", from, to, err), nil)
	}
	defer c.ckpts.Remove(client, to) // once restored (or not), the copy is the fork's kernel's, not a checkpoint

	var info CheckpointInfo
	if saved.Kind == checkpoint.KindSnapshot {
		// The source's sandbox, memory and all, restored as the fork's.
		if info, err = c.restoreSnapshot(ctx, dst, saved, false, "fork of "+from, false); err != nil { // snapshot.go
			c.sessions.Drop(dst)
			c.eng.RemoveWorkspace(dst.Internal)
			return ForkInfo{}, fmt.Errorf("fork session %q into %q: %w", from, to, err)
		}
	} else if err = c.eng.Open(ctx, dst, false); err != nil {
		c.sessions.Drop(dst)
		c.eng.RemoveWorkspace(dst.Internal)
		return ForkInfo{}, fmt.Errorf("fork session %q into %q: start its kernel: %w", from, to, err)
	} else {
		info, err = c.restoreLocked(ctx, dst, saved, "fork of "+from)
	}
	if err != nil {
		// A fork with part of its source's state is no fork: nothing is left.
		_ = c.eng.DestroyLocked(ctx, dst, "its fork failed", false)
		return ForkInfo{}, fmt.Errorf("fork session %q into %q: %w", from, to, err)
	}
	c.sessions.Update(dst, func(s *session.Session) {
		s.Docs, s.Note, s.History = docs, note, hist
		if s.Docs == nil {
			s.Docs = map[string]string{}
		}
	})
	took := time.Since(started)
	c.rec.Record(audit.Entry{Event: "session.fork", SessionID: dst.Internal, UserID: client, Success: true, Severity: audit.Info,
		Details: map[string]any{"session": to, "source_session": from, "source_session_id": src.Internal, "saved": len(info.Saved), "skipped": len(saved.Skipped),
			"bytes": saved.Bytes, "fork_ms": took.Milliseconds()}})
	return ForkInfo{SessionID: to, Source: from, Saved: info.Saved, Skipped: saved.Skipped, FilesLeft: saved.FilesLeft, NotCopied: notCopied, Kind: saved.Kind, NotWhole: saved.NotWhole,
		Bytes: saved.Bytes, Duration: took, View: c.sessions.View(dst)}, nil
}

// forkable refuses a source a job holds (session-job) or that is not live
// and idle (checkpoint-state).
func (c *Keeper) forkable(client string, src *session.Session) error {
	// The job first: a running job makes its session busy, and "busy" would
	// hide the job the caller must wait for or cancel (core/engine/background); a queued
	// job's session is idle, but not free.
	if err := c.eng.RefuseIfJob(src, "fork_session"); err != nil {
		return err
	}
	if st := c.sessions.State(src); st != session.StateIdle {
		return c.eng.Refuse(client, src.ID, "fork_session", refusal.New(checkpoint.RuleCheckpointState, "session %q is %s: only a live, idle session can be forked (run code in it first, or wait for its run to end)", src.ID, st), nil)
	}
	return nil
}
