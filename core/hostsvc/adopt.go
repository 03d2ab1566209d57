package hostsvc

import (
	"fmt"
	"sort"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Sessions handed between cores (runtime.SessionStore): what the core that
// serves a session must know of its container for the plugin to reach it
// again, and the taking over and handing over of that container.

// Endpoints is the workspace that container id of this plugin mounts and
// the endpoints it declared, as a session record keeps them.
func (h *Host) Endpoints(id string) (workspaceID string, eps []runtime.SessionEndpoint, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.workspaces[id]
	if !ok || t.Ephemeral {
		return "", nil, false
	}
	for _, e := range t.endpoints {
		eps = append(eps, runtime.SessionEndpoint{Name: e.Name, Path: e.Path})
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].Name < eps[j].Name })
	return t.SessionID, eps, true
}

// Adopt takes over a running container of this plugin's that another core
// created for a session (claimed in the runtime first): from now on the
// plugin may operate it and dial the endpoints it declared, as if it had
// created it here. Its workspace lives in the sandbox (a remote runtime);
// the core keeps only its name.
func (h *Host) Adopt(id, workspaceID string, eps []runtime.SessionEndpoint) error {
	if h.m.Remote() == nil {
		return fmt.Errorf("container %s: only a runtime whose sandboxes keep their workspace can hand a session over", id)
	}
	w, err := h.ws.Create(workspaceID)
	if err != nil {
		return err
	}
	t := &tracked{Workspace: w, stop: func() {}, endpoints: map[string]Endpoint{}}
	for _, e := range eps {
		t.endpoints[e.Name] = Endpoint{ContainerID: id, Name: e.Name, Path: e.Path, Workspace: w}
	}
	h.m.Adopt(h.plugin, id)
	h.mu.Lock()
	h.workspaces[id] = t
	h.mu.Unlock()
	h.ws.Claim(w, h.plugin)
	return nil
}

// Release hands container id over to another core: it is forgotten
// without being removed, and the plugin may no longer reach it (the
// runtime cuts the channels already open: runtime.SessionStore.Forget).
func (h *Host) Release(id string) {
	h.mu.Lock()
	t, ok := h.workspaces[id]
	delete(h.workspaces, id)
	h.mu.Unlock()
	h.m.Release(id)
	if ok {
		t.stop()
	}
}
