package proxy

import (
	"sync"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
)

// recorder keeps every audit line.
type recorder struct {
	mu      sync.Mutex
	entries []audit.Entry
	fail    error // Check and Write answer this when set
}

func (r *recorder) Record(e audit.Entry) { _ = r.Write(e) }

func (r *recorder) Write(e audit.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	e.Details = audit.Redact(e.Details) // as the real log does
	r.entries = append(r.entries, e)
	return nil
}

func (r *recorder) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail
}

func (r *recorder) all(event string) []audit.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Entry
	for _, e := range r.entries {
		if e.Event == event {
			out = append(out, e)
		}
	}
	return out
}

func network(edit func(*config.Network)) config.Network {
	n := config.Default().Network
	if edit != nil {
		edit(&n)
	}
	return n
}
