package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// ErrNoSnapshot is a container that cannot be saved whole: it does not
// run under gVisor, or the runtime cannot save sandboxes. The error says
// which; a checkpoint then keeps the session's variables instead.
var ErrNoSnapshot = errors.New("the sandbox cannot be saved whole")

// CanSnapshot says whether container id can be saved whole, and if not,
// why (wrapping ErrNoSnapshot).
func (m *Manager) CanSnapshot(id string) error {
	m.mu.Lock()
	_, gvisor := m.gvisor[id]
	m.mu.Unlock()
	switch {
	case m.snaps == nil:
		return fmt.Errorf("%w: this runtime cannot save a sandbox whole (gVisor on Podman can)", ErrNoSnapshot)
	case !gvisor:
		return fmt.Errorf("%w: it runs under runc, whose sandboxes cannot be saved whole here (security.isolation = \"gvisor\" sandboxes can)", ErrNoSnapshot)
	}
	return nil
}

// Snapshot saves plugin's running container id whole into the empty
// directory dir; with stop the container ends with the save, else it goes
// on. Audited (container.snapshot, with its time and size).
func (m *Manager) Snapshot(ctx context.Context, plugin, id, dir string, stop bool) error {
	if err := m.check(plugin, id, "snapshot"); err != nil {
		return err
	}
	if err := m.CanSnapshot(id); err != nil {
		return err
	}
	t0 := time.Now()
	err := m.snaps.Snapshot(ctx, id, dir, stop)
	d := map[string]any{"duration_ms": time.Since(t0).Milliseconds(), "stopped": stop}
	if err == nil {
		d["bytes"] = workspace.DiskUsage(dir, nil)
	}
	m.record(audit.ContainerSnapshot, plugin, id, err, d)
	return err
}

// RestoreOnStart makes the next Start of plugin's container id (created
// from the same intent as the container dir's snapshot was taken of)
// restore that snapshot.
func (m *Manager) RestoreOnStart(plugin, id, dir string) error {
	if err := m.check(plugin, id, "restore"); err != nil {
		return err
	}
	if err := m.CanSnapshot(id); err != nil {
		return err
	}
	return m.snaps.RestoreOnStart(id, dir)
}

// ImageID is the id of the image gVisor container id was created from
// ("": not known, or not a gVisor container).
func (m *Manager) ImageID(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gvisor[id]
}

// ForgetRestore drops the mark of a restore no start used, and reports
// whether there was one (after a start: it did not restore).
func (m *Manager) ForgetRestore(id string) bool {
	return m.snaps != nil && m.snaps.ForgetRestore(id)
}

// Limits are the limits container id was created with (zero: not one of
// this manager's).
func (m *Manager) Limits(id string) runtime.Limits {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.limits[id]
}
