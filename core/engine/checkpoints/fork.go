package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
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

// MaxForks bounds the forks one fork_session makes at once (count).
const MaxForks = 8

// RuleForkCount refuses a count of forks out of bounds.
const RuleForkCount = "fork-count"

// ForkSession starts session to (forkID(from) when empty) with a copy of
// client's session from: its variables, working directory, documentation
// and history. The source must be live and idle; it is not changed.
func (c *Keeper) ForkSession(ctx context.Context, client, from, to string) (ForkInfo, error) {
	forks, err := c.ForkSessions(ctx, client, from, to, 1)
	if err != nil {
		return ForkInfo{}, err
	}
	return forks[0], nil
}

// forkTargets are the ids of count forks of from: to itself for one (a
// fresh id when empty), else to-1 … to-count (fresh ids when empty).
func forkTargets(from, to string, count int) []string {
	if count == 1 {
		if to == "" {
			to = forkID(from)
		}
		return []string{to}
	}
	ids := make([]string, count)
	for i := range ids {
		if to == "" {
			ids[i] = forkID(from)
		} else {
			ids[i] = fmt.Sprintf("%s-%d", to, i+1)
		}
	}
	return ids
}

// ForkSessions makes count forks of client's session from at once, all
// from one copy of it: the source is saved once, and each fork restores
// that copy in its own new session, side by side. All are made or none:
// a fork that fails takes the others down with it.
func (c *Keeper) ForkSessions(ctx context.Context, client, from, to string, count int) ([]ForkInfo, error) {
	const tool = "fork_session"
	if count < 1 || count > MaxForks {
		return nil, c.eng.Refuse(client, from, tool, refusal.New(RuleForkCount, "count %d: make 1 to %d forks at once", count, MaxForks), nil)
	}
	src, err := c.eng.Lookup(ctx, client, from, tool)
	if err != nil {
		return nil, err
	}
	ids := forkTargets(from, to, count)
	for _, id := range ids {
		if err := session.CheckID(id); err != nil {
			return nil, c.eng.Refuse(client, id, tool, err, map[string]any{"source_session": from})
		}
	}
	if c.checkpointCode(src.Backend) == nil {
		return nil, c.eng.Refuse(client, from, tool, refusal.New(checkpoint.RuleCheckpointLanguage, "sessions of %s in backend %s cannot be forked: a fork copies variables with the backend's checkpoint code, and it reports none", c.eng.LanguageName(src.Language), src.Backend), nil)
	}
	taken := func(id string) error {
		what := "new_session_id"
		if count > 1 {
			what = "the fork id"
		}
		return refusal.New(RuleForkTarget, "%s %q is taken: you have a session or a checkpoint of that id (list_sessions shows both); choose another id, or omit new_session_id for fresh ones", what, id)
	}
	for _, id := range ids {
		if _, ok := c.Get(client, id); ok || c.sessions.Live(client, id) {
			return nil, c.eng.Refuse(client, id, tool, taken(id), map[string]any{"source_session": from})
		}
	}
	// A busy source is refused now, not waited for: its session lock is
	// held for the whole run (up to execution.max_timeout), and the wait
	// would hold the forks' session slots, out of the caller's reach.
	if err := c.forkable(client, src); err != nil {
		return nil, err
	}
	started := time.Now()
	// Admitted like any new session (sessions.max_concurrent, the tenant's
	// quota), each of them, before the source's kernel is asked for anything.
	var dsts []*session.Session
	drop := func() {
		for _, d := range dsts {
			c.sessions.Drop(d)
		}
	}
	for _, id := range ids {
		dst, created, err := c.eng.Acquire(ctx, engine.Request{Language: src.Language, SessionID: id, Client: client, CustomImage: src.Start.Image, Environment: src.Start.Env}, src.Backend, tool)
		if err == nil && !created {
			err = taken(id)
		}
		if err != nil {
			drop()
			return nil, c.eng.Refuse(client, id, tool, err, map[string]any{"source_session": from})
		}
		dst.Lock()
		defer dst.Unlock()
		dst.Pending = false // no checkpoint of its own: what it restores is the fork's copy
		dsts = append(dsts, dst)
	}

	src.Lock()
	if err := c.forkable(client, src); err != nil { // again: it may have changed while the lock was waited for
		src.Unlock()
		drop()
		return nil, err
	}
	// One copy, kept under the first fork's id while they restore it.
	saved, err := c.saveLocked(ctx, src, ids[0], "fork into "+strings.Join(ids, ", "))
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
	if src.SandboxGrant != nil && len(src.SandboxGrant.Names()) > 0 {
		notCopied = append(notCopied, fmt.Sprintf("the host roots mounted in %q: a fork starts without them, and a session's roots are mounted on its first call", from))
	}
	src.Unlock()
	failed := func(err error) {
		c.rec.Record(audit.Entry{Event: "session.fork", SessionID: src.Internal, UserID: client, Success: false, Error: audit.ErrText(err), Severity: audit.Warning,
			Details: map[string]any{"source_session": from, "sessions": ids, "count": count, "fork_ms": time.Since(started).Milliseconds()}})
	}
	if err != nil {
		drop()
		failed(err)
		return nil, c.eng.Refuse(client, from, tool, fmt.Errorf("fork session %q into %s: %w", from, strings.Join(ids, ", "), err), nil)
	}
	defer c.ckpts.Remove(client, ids[0]) // once restored (or not), the copy is the forks' kernels', not a checkpoint

	infos := make([]CheckpointInfo, len(dsts))
	errs := make([]error, len(dsts))
	var wg sync.WaitGroup
	for i, dst := range dsts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[i], errs[i] = c.restoreFork(ctx, dst, saved, from)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// A fork with part of its source's state is no fork, and a call
		// that asked for count forks gets them all or none.
		for i, dst := range dsts {
			if errs[i] == nil {
				_ = c.eng.DestroyLocked(ctx, dst, "a fork of the same call failed", false)
			}
		}
		failed(err)
		return nil, fmt.Errorf("fork session %q into %s: %w", from, strings.Join(ids, ", "), err)
	}
	took := time.Since(started)
	out := make([]ForkInfo, len(dsts))
	for i, dst := range dsts {
		c.sessions.Update(dst, func(s *session.Session) {
			s.Docs, s.Note, s.History = maps.Clone(docs), note, hist.Clone()
			if s.Docs == nil {
				s.Docs = map[string]string{}
			}
		})
		c.rec.Record(audit.Entry{Event: "session.fork", SessionID: dst.Internal, UserID: client, Success: true, Severity: audit.Info,
			Details: map[string]any{"session": ids[i], "source_session": from, "source_session_id": src.Internal, "saved": len(infos[i].Saved), "skipped": len(saved.Skipped),
				"bytes": saved.Bytes, "fork_ms": took.Milliseconds(), "count": count}})
		out[i] = ForkInfo{SessionID: ids[i], Source: from, Saved: infos[i].Saved, Skipped: saved.Skipped, FilesLeft: saved.FilesLeft, NotCopied: notCopied, Kind: saved.Kind, NotWhole: saved.NotWhole,
			Bytes: saved.Bytes, Duration: took, View: c.sessions.View(dst)}
	}
	return out, nil
}

// restoreFork brings the source's copy saved into the new session dst
// (locked): its whole sandbox, or a new kernel loading its variables. A
// fork that fails is gone.
func (c *Keeper) restoreFork(ctx context.Context, dst *session.Session, saved checkpoint.Meta, from string) (CheckpointInfo, error) {
	if saved.Kind == checkpoint.KindSnapshot {
		// The source's sandbox, memory and all, restored as the fork's.
		info, err := c.restoreSnapshot(ctx, dst, saved, false, "fork of "+from, false) // snapshot.go
		if err != nil {
			c.eng.CloseGrant(dst)
			c.sessions.Drop(dst)
			c.eng.RemoveWorkspace(dst.Internal)
			return info, fmt.Errorf("%s: %w", dst.ID, err)
		}
		return info, nil
	}
	if err := c.eng.Open(ctx, dst, false); err != nil {
		c.eng.CloseGrant(dst) // Open may have granted it its tenant's isolation
		c.sessions.Drop(dst)
		c.eng.RemoveWorkspace(dst.Internal)
		return CheckpointInfo{}, fmt.Errorf("%s: start its kernel: %w", dst.ID, err)
	}
	info, err := c.restoreLocked(ctx, dst, saved, "fork of "+from)
	if err != nil {
		_ = c.eng.DestroyLocked(ctx, dst, "its fork failed", false)
		return info, fmt.Errorf("%s: %w", dst.ID, err)
	}
	return info, nil
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
