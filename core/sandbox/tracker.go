package sandbox

import (
	"fmt"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/policy"
)

// recentMax bounds how many removed containers the tracker remembers.
const recentMax = 4096

// Tracker is the set of containers this forge instance created, with the
// plugin that owns each. Only tracked containers may be touched, and only by
// their plugin. It also remembers recently removed containers, so that an
// plugin that asks again for one of its own (a kernel backend removes a dead
// kernel's container, then closes the session) is told it is gone rather
// than being reported as touching a container that is not ours.
type Tracker struct {
	mu      sync.Mutex
	plugins map[string]string
	recent  map[string]string // removed id → its plugin
	order   []string          // removal order, oldest first
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{plugins: map[string]string{}, recent: map[string]string{}}
}

// Add records a container created for plugin.
func (t *Tracker) Add(id, plugin string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.plugins[id] = plugin
}

// Remove forgets a container, remembering that it was removed.
func (t *Tracker) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	plugin, ok := t.plugins[id]
	if !ok {
		return
	}
	delete(t.plugins, id)
	if _, seen := t.recent[id]; !seen {
		t.order = append(t.order, id)
	}
	t.recent[id] = plugin
	for len(t.order) > recentMax {
		delete(t.recent, t.order[0])
		t.order = t.order[1:]
	}
}

// RemovedError is an operation on a container of the caller's own that was
// already removed: a race between plugin and core, not a violation.
type RemovedError struct {
	ID, Op string
}

func (e *RemovedError) Error() string {
	return fmt.Sprintf("cannot %s container %s: it was already removed", e.Op, short(e.ID))
}

// Check refuses an operation on a container that is not ours or not plugin's.
// The core itself passes plugin "" to act on any container it created. A
// container of plugin's that was removed gives *RemovedError.
func (t *Tracker) Check(id, plugin, op string) error {
	t.mu.Lock()
	o, ok := t.plugins[id]
	gone, removed := t.recent[id]
	t.mu.Unlock()
	if !ok {
		if removed && (plugin == "" || gone == plugin) {
			return &RemovedError{ID: id, Op: op}
		}
		if removed {
			return &policy.Violation{Rule: "not-owner", Detail: fmt.Sprintf("cannot %s container %q: it belonged to plugin %q, not %q", op, short(id), gone, plugin)}
		}
		return &policy.Violation{Rule: "not-our-container", Detail: fmt.Sprintf("cannot %s container %q: it was not created by this forge instance", op, short(id))}
	}
	if plugin != "" && o != plugin {
		return &policy.Violation{Rule: "not-owner", Detail: fmt.Sprintf("cannot %s container %q: it belongs to plugin %q, not %q", op, short(id), o, plugin)}
	}
	return nil
}

// IDs lists tracked containers.
func (t *Tracker) IDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.plugins))
	for id := range t.plugins {
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
