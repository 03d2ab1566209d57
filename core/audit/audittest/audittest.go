// Package audittest is an audit.Recorder for tests: it keeps every entry.
package audittest

import (
	"sync"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// Recorder keeps the entries recorded, safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

// Record implements audit.Recorder.
func (r *Recorder) Record(e audit.Entry) {
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
}

// Entries are the entries recorded so far.
func (r *Recorder) Entries() []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Entry(nil), r.entries...)
}

// Take returns the entries recorded so far and forgets them.
func (r *Recorder) Take() []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.entries
	r.entries = nil
	return out
}
