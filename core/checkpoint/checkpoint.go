// Package checkpoint keeps sessions' checkpoints: per client and session
// id, a checkpoint's description (Meta) and its files (the kernel's saved
// namespace and the session's working directory), within bounds. Store is
// what the engine needs of a checkpoint store; Dir is the store of one
// host, a directory under the forge's state directory. A cluster of
// servers needs a store they share: another Store.
package checkpoint

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Rules a checkpoint request can break (see docs/audit.md).
const (
	RuleCheckpointLanguage = "checkpoint-language"
	RuleCheckpointNotFound = "checkpoint-not-found"
	RuleCheckpointOwner    = "checkpoint-owner"
	RuleCheckpointState    = "checkpoint-state"
)

// Rules of checkpoint storage.
const (
	RuleCheckpointQuota = "checkpoint-quota"
	// RuleCheckpointStore: the checkpoint would pass
	// sessions.checkpoint_store_quota, the bound of all checkpoints on the
	// host together.
	RuleCheckpointStore = "checkpoint-store-full"
	// EventCheckpointExpired is the audit event of a checkpoint removed
	// after sessions.checkpoint_ttl.
	EventCheckpointExpired = "session.checkpoint_expired"
)

// Meta describes a checkpoint: whose session it is, when it was made,
// which variables it holds, what was left out and its size. Its JSON is
// the store's record (Dir: meta.json).
type Meta struct {
	SessionID string            `json:"session_id"`
	Language  string            `json:"language,omitempty"`
	Backend   string            `json:"backend,omitempty"`
	Created   time.Time         `json:"created,omitzero"`
	Saved     []string          `json:"saved,omitempty"`          // variables saved
	Skipped   map[string]string `json:"skipped,omitempty"`        // variables that could not be saved → why
	FilesLeft []string          `json:"files_left_out,omitempty"` // entries of the working directory not saved (links, pipes)
	Bytes     int64             `json:"bytes,omitempty"`          // size of the checkpoint (namespace and files)
	Client    string            `json:"owner"`
	// Kind is KindSnapshot for a whole sandbox, "" for variables.
	Kind string `json:"kind,omitempty"`
	// Suspended: the snapshot was taken because the session was idle
	// (sessions.suspend_after), its sandbox removed since.
	Suspended bool `json:"suspended,omitempty"`
	// NotWhole says why a checkpoint of a gVisor session holds its
	// variables and not the whole sandbox ("": it does, or could not).
	NotWhole string `json:"not_whole,omitempty"`
}

// Errors of Get.
var (
	// ErrNotFound: the client has no checkpoint of that id.
	ErrNotFound = errors.New("no such checkpoint")
	// ErrForeign: what the store holds under the client's key for that id
	// names another client or id (a hash collision, a copied directory). It
	// is not the client's.
	ErrForeign = errors.New("the checkpoint names another owner")
)

// FullError is a checkpoint refused because the store has no room for it:
// Used bytes of the store's bound are taken.
type FullError struct {
	Used int64
	// Client: the client's own share of the store is full (Dir's
	// clientQuota), not the store; Quota is that share.
	Client bool
	Quota  int64
}

func (e *FullError) Error() string {
	if e.Client {
		return fmt.Sprintf("the client's share of the checkpoint store is full (%d of %d bytes taken)", e.Used, e.Quota)
	}
	return fmt.Sprintf("the checkpoint store is full (%d bytes taken)", e.Used)
}

// Store keeps one checkpoint per client and session id. Clients and ids are
// the engine's (ids valid by workspace.CheckSessionID); a client never
// sees another's checkpoints.
type Store interface {
	// Put stores m (m.Client's checkpoint of m.SessionID), replacing the
	// previous one only once the new one is whole: on an error the
	// previous one is kept and nothing of the new one is left. write puts
	// the checkpoint's files into dir, at most budget bytes (quota, the
	// bound of one checkpoint, 0: none, or less when the store has less
	// room), and returns the entries it left out (m.FilesLeft). Put sets
	// m.Bytes to the checkpoint's size and returns m as stored (on an
	// error, with what it had measured). A
	// checkpoint over quota fails with an error wrapping
	// workspace.ErrOverLimit; one the store has no room for with a
	// *FullError.
	Put(m Meta, quota int64, write func(dir string, budget int64) (filesLeft []string, err error)) (Meta, error)
	// Get returns client's checkpoint of id: ErrNotFound when there is
	// none, ErrForeign (with what it names) when the record found is not
	// client's.
	Get(client, id string) (Meta, error)
	// Read calls read with a directory holding the files of client's
	// checkpoint of id, as write put them.
	Read(client, id string, read func(dir string) error) error
	// List returns client's checkpoints, newest first.
	List(client string) []Meta
	// Remove deletes client's checkpoint of id (and what is left of one
	// being built); it reports whether there was one.
	Remove(client, id string) bool
	// Expire removes every client's checkpoints made more than ttl before
	// now, calling removed for each (with the error of its removal), and
	// debris (interrupted checkpoints) older than ttl silently.
	Expire(now time.Time, ttl time.Duration, removed func(Meta, error))
}

// RestoreNotice is the sentence an agent reads after a restore.
func RestoreNotice(m Meta) string {
	if m.Kind == KindSnapshot && m.Suspended {
		return fmt.Sprintf("Session %s was suspended at %s after sessions.suspend_after without a call, and resumed from its snapshot: the whole sandbox is back as it was (variables, imports, open files, sockets, generators, the execution count).",
			m.SessionID, m.Created.Format(time.RFC3339))
	}
	if m.Kind == KindSnapshot {
		return fmt.Sprintf("Session %s was restored from its snapshot of %s: the whole sandbox is back as it was (variables, imports, open files, sockets, generators, the execution count).",
			m.SessionID, m.Created.Format(time.RFC3339))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Session %s was restored in a new kernel from its checkpoint of %s: %d variable(s) back (%s).",
		m.SessionID, m.Created.Format(time.RFC3339), len(m.Saved), strings.Join(m.Saved, ", "))
	if len(m.Skipped) > 0 {
		names := make([]string, 0, len(m.Skipped))
		for k := range m.Skipped {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, k+" ("+m.Skipped[k]+")")
		}
		fmt.Fprintf(&b, " Not saved at the checkpoint: %s.", strings.Join(parts, "; "))
	}
	return b.String()
}
