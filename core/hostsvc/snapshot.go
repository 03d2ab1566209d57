package hostsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/sandbox"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// A snapshot of a container, as Snapshot lays it out in its directory:
// the sandbox saved whole by the runtime, a copy of its workspace as it was
// then (times kept: runsc restores only over files as they were), and the
// record that recreates the container.
const (
	SnapshotSandbox   = "sandbox"
	SnapshotWorkspace = "workspace"
	SnapshotRecord    = "sandbox.json"
)

// snapshotOverhead is what a snapshot holds beside the sandbox's memory
// (the Sentry's state, checkpoint.img: under 1 MiB measured here),
// with a margin.
const snapshotOverhead = 64 << 20

// SandboxRecord is what recreates a snapshotted container: the intent it
// was created from (runsc restores into a container of the same spec) and
// the image it ran (a restore into another image is refused).
type SandboxRecord struct {
	Plugin  string      `json:"plugin"`
	ImageID string      `json:"image_id"`
	Intent  host.Intent `json:"intent"`
}

// Snapshot saves this plugin's running container id whole into dir (which
// must not exist), at most budget bytes (0: no bound): its sandbox, its
// workspace and the record that recreates it; with stop the container
// ends with the save, so that nothing runs between the saved moment and
// the copy of its workspace. A container that cannot be saved whole
// answers an error wrapping sandbox.ErrNoSnapshot (CanSnapshot), before
// anything is written. On an error dir is left for the caller to remove.
func (h *Host) Snapshot(ctx context.Context, id, dir string, budget int64, stop bool) error {
	need, err := h.CanSnapshot(id)
	if err != nil {
		return err
	}
	// runsc writes the sandbox's memory before anything can measure it:
	// what the memory limit allows, and the Sentry's own state beside it,
	// must fit the room left, so the write never passes the store's bound.
	if budget > 0 && need > budget {
		return fmt.Errorf("%w: the sandbox may hold up to %d bytes of memory and files (its limits), more than the %d bytes left", workspace.ErrOverLimit, need, budget)
	}
	h.mu.Lock()
	t := h.workspaces[id]
	h.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	sb := filepath.Join(dir, SnapshotSandbox)
	if err := os.Mkdir(sb, 0o700); err != nil {
		return err
	}
	if err := h.m.Snapshot(ctx, h.plugin, id, sb, stop); err != nil {
		return err
	}
	used := workspace.DiskUsage(sb, nil)
	if budget > 0 && used > budget {
		return fmt.Errorf("%w: the sandbox's memory takes %d bytes, over the %d bytes left", workspace.ErrOverLimit, used, budget)
	}
	room := int64(0)
	if budget > 0 {
		room = budget - used
	}
	left, _, err := workspace.NewFiles(t.Path).CopyOut(filepath.Join(dir, SnapshotWorkspace), room, nil)
	if err != nil {
		return fmt.Errorf("copy the workspace: %w", err)
	}
	if len(left) > 0 {
		// Made between the check and the copy: the sandbox may hold it open,
		// and restored without it would not be the one saved.
		return fmt.Errorf("%w: its workspace holds entries that cannot be copied (%.200q)", sandbox.ErrNoSnapshot, left)
	}
	rec, _ := json.Marshal(SandboxRecord{Plugin: h.plugin, ImageID: h.m.ImageID(id), Intent: t.intent})
	return os.WriteFile(filepath.Join(dir, SnapshotRecord), rec, 0o600)
}

// CanSnapshot says whether this plugin's container id can be saved whole,
// and if so the most bytes a snapshot of it can take (its memory limit,
// the Sentry's state and its workspace quota); if not, why (an error
// wrapping sandbox.ErrNoSnapshot). The workspace is looked at: a link, a
// pipe or a device in it cannot be copied with the sandbox.
func (h *Host) CanSnapshot(id string) (int64, error) {
	h.mu.Lock()
	t := h.workspaces[id]
	h.mu.Unlock()
	switch {
	case t == nil:
		return 0, fmt.Errorf("%w: container %s is not plugin %s's", sandbox.ErrNoSnapshot, id, h.plugin)
	case t.intent.Image == "":
		return 0, fmt.Errorf("%w: its container was made by another core, and how to make it again is not known here", sandbox.ErrNoSnapshot)
	case t.intent.ToolsGrant != "" || t.intent.NetworkGrant != "":
		return 0, fmt.Errorf("%w: it holds a tool or network grant, whose connections to the core cannot be saved with it", sandbox.ErrNoSnapshot)
	case t.hostRoots:
		return 0, fmt.Errorf("%w: it mounts host roots, which a snapshot does not hold and a restore would mount again", sandbox.ErrNoSnapshot)
	}
	if err := h.m.CanSnapshot(id); err != nil {
		return 0, err
	}
	lim := h.m.Limits(id)
	if lim.MemoryBytes <= 0 {
		return 0, fmt.Errorf("%w: its container has no memory limit, which bounds a snapshot", sandbox.ErrNoSnapshot)
	}
	entries, truncated, err := workspace.NewFiles(t.Path).List(".", workspace.MaxFiles)
	if err != nil {
		return 0, fmt.Errorf("%w: its workspace cannot be listed: %v", sandbox.ErrNoSnapshot, err)
	}
	if truncated {
		return 0, fmt.Errorf("%w: its workspace holds more than %d entries", sandbox.ErrNoSnapshot, workspace.MaxFiles)
	}
	for _, e := range entries {
		if e.Type != "file" && e.Type != "directory" {
			return 0, fmt.Errorf("%w: its workspace holds %s, a %s, which cannot be copied with it (remove it, then checkpoint again)", sandbox.ErrNoSnapshot, e.Path, e.Type)
		}
	}
	return lim.MemoryBytes + snapshotOverhead + h.ws.Quota(), nil
}

// Restore creates this plugin's container for session sessionID from the
// snapshot in dir (as Snapshot laid it out, checked by the caller): the
// session's workspace is made from the copy, the container from the
// recorded intent over it, and its start restores the saved sandbox. The
// container runs when Restore returns; on an error nothing of it is left.
func (h *Host) Restore(ctx context.Context, sessionID, dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, SnapshotRecord))
	if err != nil {
		return "", err
	}
	var rec SandboxRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return "", fmt.Errorf("the snapshot's record: %w", err)
	}
	if rec.Plugin != h.plugin {
		return "", fmt.Errorf("the snapshot is of plugin %s's container, not %s's", rec.Plugin, h.plugin)
	}
	in := rec.Intent
	// The grant the sandbox was made with has ended; a snapshot is never
	// of one with roots (CanSnapshot), and always of a gVisor sandbox.
	in.SessionID, in.WarmUp, in.Files, in.SandboxGrant = sessionID, false, nil, ""
	places, err := host.EndpointPlaces(in)
	if err != nil {
		return "", err
	}
	lim, err := h.limits(in)
	if err != nil {
		return "", err
	}
	w, err := h.ws.Create(sessionID)
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = h.ws.RemoveSession(sessionID)
		return "", err
	}
	if err := workspace.NewFiles(w.Path).CopyIn(filepath.Join(dir, SnapshotWorkspace)); err != nil {
		return fail(fmt.Errorf("copy the workspace back: %w", err))
	}
	id, err := h.create(ctx, in, w, lim, nil, nil, nil, runtime.IsolationGVisor, places)
	if err != nil {
		return fail(err)
	}
	undo := func(err error) (string, error) {
		h.m.ForgetRestore(id)
		_ = h.Remove(context.WithoutCancel(ctx), id)
		return fail(err)
	}
	if got := h.m.ImageID(id); got != rec.ImageID {
		return undo(fmt.Errorf("%w: the snapshot ran image %s, and %s is now %s", ErrSnapshotImage, rec.ImageID, in.Image, got))
	}
	if err := h.m.RestoreOnStart(h.plugin, id, filepath.Join(dir, SnapshotSandbox)); err != nil {
		return undo(err)
	}
	if err := h.m.Start(ctx, h.plugin, id); err != nil {
		return undo(fmt.Errorf("restore the sandbox: %w", err))
	}
	if h.m.ForgetRestore(id) {
		// The runtime started the command afresh: a new kernel in a copy of
		// the old one's files is not the session that was saved.
		return undo(errors.New("restore the sandbox: the container started without restoring its snapshot (the runtime did not run the core's wrapper's restore)"))
	}
	return id, nil
}

// ErrSnapshotImage is a snapshot whose image is not the one its container
// would now be created from (rebuilt, or retagged): never restored.
var ErrSnapshotImage = errors.New("the image changed since the snapshot")
