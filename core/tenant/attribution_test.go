package tenant

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

func TestAttribution(t *testing.T) {
	a := NewAttribution()
	steps := []struct {
		e    audit.Entry
		want string
	}{
		{audit.Entry{Event: audit.PluginLoad}, ""},
		{audit.Entry{Event: audit.ExecutionRequest, UserID: "alice", Details: map[string]any{"run_id": "r1"}}, "alice"},
		{audit.Entry{Event: audit.ContainerCreate, Details: map[string]any{"run_id": "r1", "container_id": "c1"}}, "alice"},
		{audit.Entry{Event: audit.ContainerStart, Details: map[string]any{"container_id": "c1"}}, "alice"},
		{audit.Entry{Event: audit.ContainerRemove, Details: map[string]any{"container_id": "c1"}}, "alice"},
		{audit.Entry{Event: audit.ContainerStart, Details: map[string]any{"container_id": "c1"}}, ""}, // forgotten
		{audit.Entry{Event: audit.ExecutionComplete, UserID: "alice", Details: map[string]any{"run_id": "r1"}}, "alice"},
		{audit.Entry{Event: audit.ContainerCreate, Details: map[string]any{"run_id": "r1", "container_id": "c9"}}, ""},
		{audit.Entry{Event: audit.SessionCreate, UserID: "bob", SessionID: "s"}, "bob"},
		{audit.Entry{Event: audit.ContainerCreate, SessionID: "s", Details: map[string]any{"container_id": "c2"}}, "bob"},
		{audit.Entry{Event: audit.ContainerExec, Details: map[string]any{"container_id": "c2"}}, "bob"},
		{audit.Entry{Event: audit.SecurityViolation, SessionID: "s"}, "bob"},
		{audit.Entry{Event: audit.ExecutionRequest, UserID: "bob", SessionID: "s", Details: map[string]any{"run_id": "r2"}}, "bob"},
		{audit.Entry{Event: audit.ExecutionComplete, UserID: "bob", SessionID: "s", Details: map[string]any{"run_id": "r2"}}, "bob"},
		{audit.Entry{Event: audit.SessionDestroy, UserID: "bob", SessionID: "s"}, "bob"},
		{audit.Entry{Event: audit.SecurityViolation, SessionID: "s"}, ""},
	}
	for i, s := range steps {
		e := s.e
		a.Hook(&e)
		if e.UserID != s.want {
			t.Errorf("step %d (%s): tenant %q, want %q", i, e.Event, e.UserID, s.want)
		}
	}
	// What ended is forgotten: the tables hold only what is live.
	if len(a.runs)+len(a.sessions)+len(a.containers) != 1 { // c2 was never removed
		t.Errorf("tables not emptied: runs %v sessions %v containers %v", a.runs, a.sessions, a.containers)
	}
}
