package sandbox

import (
	"fmt"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/policy"
)

// Tracker is the set of containers this forge instance created, with the
// plugin that owns each. Only tracked containers may be touched, and only by
// their owner.
type Tracker struct {
	mu     sync.Mutex
	owners map[string]string
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{owners: map[string]string{}} }

// Add records a container created for owner.
func (t *Tracker) Add(id, owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.owners[id] = owner
}

// Remove forgets a container.
func (t *Tracker) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.owners, id)
}

// Check refuses an operation on a container that is not ours or not owner's.
// The core itself passes owner "" to act on any container it created.
func (t *Tracker) Check(id, owner, op string) error {
	t.mu.Lock()
	o, ok := t.owners[id]
	t.mu.Unlock()
	if !ok {
		return &policy.Violation{Rule: "not-our-container", Detail: fmt.Sprintf("cannot %s container %q: it was not created by this forge instance", op, short(id))}
	}
	if owner != "" && o != owner {
		return &policy.Violation{Rule: "not-owner", Detail: fmt.Sprintf("cannot %s container %q: it belongs to plugin %q, not %q", op, short(id), o, owner)}
	}
	return nil
}

// IDs lists tracked containers.
func (t *Tracker) IDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.owners))
	for id := range t.owners {
		out = append(out, id)
	}
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
