package tenant

import (
	"sync"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// Attribution fills the tenant (Entry.UserID) of audit lines written by
// layers that do not know it (the sandbox, the host services): it learns
// session → tenant and run → tenant from the engine's lines, container →
// tenant from container.create, and applies them to later lines. Lines that
// concern no tenant (plugin loads, start-up reconciliation) stay without one.
type Attribution struct {
	mu         sync.Mutex
	sessions   map[string]string
	runs       map[string]string
	containers map[string]string
}

// NewAttribution returns an empty attribution table.
func NewAttribution() *Attribution {
	return &Attribution{sessions: map[string]string{}, runs: map[string]string{}, containers: map[string]string{}}
}

// Hook is an audit hook (audit.Logger.AddHook).
func (a *Attribution) Hook(e *audit.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	run, _ := e.Details["run_id"].(string)
	ctr, _ := e.Details["container_id"].(string)
	if e.UserID == "" {
		switch {
		case e.SessionID != "" && a.sessions[e.SessionID] != "":
			e.UserID = a.sessions[e.SessionID]
		case run != "" && a.runs[run] != "":
			e.UserID = a.runs[run]
		case ctr != "" && a.containers[ctr] != "":
			e.UserID = a.containers[ctr]
		}
	}
	if e.UserID == "" {
		return
	}
	if e.SessionID != "" {
		a.sessions[e.SessionID] = e.UserID
	}
	if run != "" {
		a.runs[run] = e.UserID
	}
	if ctr != "" {
		a.containers[ctr] = e.UserID
	}
	// Forget what ended, so the tables stay as small as what is live.
	switch e.Event {
	case audit.ContainerRemove:
		delete(a.containers, ctr)
	case audit.SessionDestroy:
		delete(a.sessions, e.SessionID)
	case audit.ExecutionComplete:
		delete(a.runs, run)
	}
}
