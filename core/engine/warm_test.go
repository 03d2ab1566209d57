package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/session"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// A backend that hands a session a pre-started kernel names the pool
// workspace that kernel mounts: the engine binds it to the session, so the
// session's files are there, a restart passes it back (and must not be
// warm), and a workspace that the backend did not create, or that another
// session has, fails the start.
func TestWarmWorkspaceBinding(t *testing.T) {
	r := newRig(t, nil, nil)
	pool := "wp1"
	r.kernel.Warm = func() string { return pool }

	// Not created by this backend: refused, no session is left.
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s1"}); err == nil {
		t.Fatal("a session started on a workspace the backend never created")
	}
	if len(r.e.Sessions("c1", false)) != 0 {
		t.Fatal("a session whose binding was refused stayed")
	}

	w, err := r.ws.Create(pool)
	if err != nil {
		t.Fatal(err)
	}
	r.ws.Claim(w, "kernel")
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	internal := session.InternalID("c1", "s1")
	if got := r.ws.SessionPath(internal); got != w.Path {
		t.Fatalf("session path %s, want the pool workspace %s", got, w.Path)
	}
	var warm bool
	for _, e := range r.audit() {
		if e.Event == "session.create" && e.Success {
			warm, _ = e.Details["warm"].(bool)
		}
	}
	if !warm {
		t.Error("session.create does not say the start was warm")
	}

	// A second session handed the same workspace is refused.
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s2"}); err == nil {
		t.Fatal("one pool workspace was bound to two sessions")
	}

	// The kernel dies: the restart names the session's workspace.
	r.e.MarkBackendDead("kernel")
	if _, err := r.exec(t, Request{Language: "python", SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if req, _ := r.kernel.Opened(internal); req.WorkspaceID != pool {
		t.Errorf("restart opened with workspace %q, want %q", req.WorkspaceID, pool)
	}
	if err := r.e.DestroySession(t.Context(), "c1", "s1"); err != nil {
		t.Fatal(err)
	}
	if r.ws.Bound(internal) != "" {
		t.Error("the binding survived destroy_session")
	}
}

// failingLog is an audit log that cannot be written.
type failingLog struct{}

func (failingLog) Record(audit.Entry)      {}
func (failingLog) Write(audit.Entry) error { return errors.New("disk full") }
func (failingLog) Check() error            { return errors.New("disk full") }

// Handing over a warm kernel creates no container, so no container audit
// refuses it: the session.create entry must be written, or the session is
// refused (fail closed) and its kernel closed.
func TestWarmStartRefusedWithoutAudit(t *testing.T) {
	r := newRig(t, nil, nil)
	r.kernel.Warm = func() string { return "wp1" }
	w, err := r.ws.Create("wp1")
	if err != nil {
		t.Fatal(err)
	}
	r.ws.Claim(w, "kernel")
	r.e.rec = failingLog{}
	_, err = r.exec(t, Request{Language: "python", SessionID: "s1"})
	if err == nil || !strings.Contains(err.Error(), "audit log cannot be written") {
		t.Fatalf("a warm session started with an unwritable audit log: %v", err)
	}
	if !slices.Contains(r.kernel.Log(), "close "+session.InternalID("c1", "s1")) {
		t.Errorf("the refused session's kernel was not closed: %v", r.kernel.Log())
	}
	if len(r.e.Sessions("c1", false)) != 0 {
		t.Error("the refused session stayed")
	}
}
