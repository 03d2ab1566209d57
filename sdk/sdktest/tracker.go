package sdktest

import (
	"context"
	"sort"
	"sync"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Tracker wraps a host.Host and remembers which containers and session
// workspaces the backend made and has not removed, so the conformance
// suite can check that nothing is left behind. Configure the backend with
// the Tracker instead of the host it wraps.
type Tracker struct {
	h host.Host

	mu         sync.Mutex
	containers map[string]bool
	pooled     map[string]string           // containers made for a warm pool (label warm=true) → their session (workspace) id
	workspaces map[string]bool             // session ids of workspaces created
	suite      map[string]bool             // sessions opened by the suite
	latest     map[string]sessionContainer // session id → its newest container
}

// sessionContainer is a container of a session and where, in the session's
// workspace, its working directory is (the mount at Intent.WorkDir).
type sessionContainer struct{ id, workSubdir string }

// Track wraps h.
func Track(h host.Host) *Tracker {
	return &Tracker{h: h, containers: map[string]bool{}, pooled: map[string]string{}, workspaces: map[string]bool{}, suite: map[string]bool{}, latest: map[string]sessionContainer{}}
}

// Sandbox implements host.Host.
func (t *Tracker) Sandbox() host.Sandbox { return trackedSandbox{t.h.Sandbox(), t} }

// Audit implements host.Host.
func (t *Tracker) Audit() host.Audit { return t.h.Audit() }

// Containers lists containers created and not removed.
func (t *Tracker) Containers() []string { return t.keys(t.containers) }

// Pooled lists containers created for a warm pool (label warm=true) and
// not removed: a backend's own until it ends, whether ready or serving a run.
func (t *Tracker) Pooled() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k := range t.pooled {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pooledSession is the session (workspace) id of a warm-pool container;
// ok is false for a container of no pool.
func (t *Tracker) pooledSession(id string) (sessionID string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sessionID, ok = t.pooled[id]
	return sessionID, ok
}

// Workspaces lists sessions whose workspaces were created and not removed.
func (t *Tracker) Workspaces() []string { return t.keys(t.workspaces) }

func (t *Tracker) keys(m map[string]bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// sessionContainer is the newest container made for session id (id "" if none).
func (t *Tracker) sessionContainer(id string) sessionContainer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.latest[id]
}

func (t *Tracker) opened(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.suite[id] = true
}

func (t *Tracker) openedBySuite(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.suite[id]
}

type trackedSandbox struct {
	host.Sandbox
	t *Tracker
}

func (s trackedSandbox) Create(ctx context.Context, in host.Intent) (host.Container, error) {
	c, err := s.Sandbox.Create(ctx, in)
	if err == nil {
		s.t.mu.Lock()
		s.t.containers[c.ID] = true
		if in.Labels["warm"] == "true" {
			s.t.pooled[c.ID] = in.SessionID
		}
		if in.SessionID != "" {
			s.t.workspaces[in.SessionID] = true
			sc := sessionContainer{id: c.ID}
			for _, m := range in.Mounts {
				if m.Target == in.WorkDir {
					sc.workSubdir = m.Subdir
				}
			}
			s.t.latest[in.SessionID] = sc
		}
		s.t.mu.Unlock()
	}
	return c, err
}

func (s trackedSandbox) Remove(ctx context.Context, id string) error {
	err := s.Sandbox.Remove(ctx, id)
	if err == nil {
		s.t.mu.Lock()
		delete(s.t.containers, id)
		delete(s.t.pooled, id)
		s.t.mu.Unlock()
	}
	return err
}

func (s trackedSandbox) RemoveWorkspace(ctx context.Context, sessionID string) error {
	err := s.Sandbox.RemoveWorkspace(ctx, sessionID)
	if err == nil {
		s.t.mu.Lock()
		delete(s.t.workspaces, sessionID)
		s.t.mu.Unlock()
	}
	return err
}
