package kernel

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Only a new session with the defaults may take a warm kernel: a warm
// container was created with the configured image, the default limits, no
// environment and no tools directory, and its mounts cannot change.
func TestWarmKernelMatches(t *testing.T) {
	b := &Backend{}
	b.cfg.Image = "mcp-forge/python:3.11"
	cases := []struct {
		name string
		req  backend.OpenSessionRequest
		want bool
	}{
		{"defaults", backend.OpenSessionRequest{SessionID: "s"}, true},
		{"the configured image named", backend.OpenSessionRequest{SessionID: "s", Image: "mcp-forge/python:3.11"}, true},
		{"another image", backend.OpenSessionRequest{SessionID: "s", Image: "mcp-forge/custom:x"}, false},
		{"memory", backend.OpenSessionRequest{SessionID: "s", Memory: "1g"}, false},
		{"environment", backend.OpenSessionRequest{SessionID: "s", Env: map[string]string{"K": "v"}}, false},
		{"a restart on its workspace", backend.OpenSessionRequest{SessionID: "s", WorkspaceID: "s"}, false},
		{"a tools grant", backend.OpenSessionRequest{SessionID: "s", ToolsGrant: "g"}, false},
		{"a sandbox grant", backend.OpenSessionRequest{SessionID: "s", SandboxGrant: "g"}, false},
		{"a sandbox grant of a pooled class", backend.OpenSessionRequest{SessionID: "s", SandboxGrant: "g", SandboxPoolGrant: "p"}, true},
	}
	for _, tc := range cases {
		if got := b.matches(tc.req); got != tc.want {
			t.Errorf("%s: matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A session with a sandbox grant and its class's pool grant starts cold
// the first time, after which kernels of the class are kept warm: created
// with the pool grant, and handed to a later session of the class only
// once the core gave the container to that session's grant. A refused
// claim starts the session cold and the kernel is removed; a grant
// without a pool grant never takes a warm kernel.
func TestWarmPoolSandboxClass(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := newBackend(t, h, testSpec(), "")
	ready := func(n int) func() bool {
		return func() bool { p := b.Pool(); return p != nil && p.Warm == n && p.Starting == 0 }
	}
	waitFor(t, "the default warm kernel", ready(1))
	first := open(t, b, backend.OpenSessionRequest{SessionID: "s1", SandboxGrant: "run1", SandboxPoolGrant: "class-g"})
	if first.WorkspaceID != "" {
		t.Fatalf("the class's first session took a warm kernel: %+v", first)
	}
	waitFor(t, "a warm kernel of the class beside the default one", ready(2))
	info := open(t, b, backend.OpenSessionRequest{SessionID: "s2", SandboxGrant: "run2", SandboxPoolGrant: "class-g"})
	if !strings.HasPrefix(info.WorkspaceID, poolIDPrefix) {
		t.Fatalf("the class's second session started cold: %+v", info)
	}
	h.mu.Lock()
	claimed, created := h.claims[info.ContainerID], h.ctrs[info.ContainerID].in.SandboxGrant
	h.mu.Unlock()
	if claimed != "run2" || created != "class-g" {
		t.Errorf("the warm kernel's container: created with %q, claimed for %q; want class-g, run2", created, claimed)
	}
	if cold := open(t, b, backend.OpenSessionRequest{SessionID: "s3", SandboxGrant: "run3"}); cold.WorkspaceID != "" {
		t.Errorf("a sandbox grant without a pool grant took a warm kernel: %+v", cold)
	}
	waitFor(t, "the class's refill", ready(2))
	h.set(func(h *fakeHost) { h.claimErr = errors.New("refused") })
	refused := open(t, b, backend.OpenSessionRequest{SessionID: "s4", SandboxGrant: "run4", SandboxPoolGrant: "class-g"})
	if refused.WorkspaceID != "" {
		t.Errorf("a session whose claim the core refused took the warm kernel: %+v", refused)
	}
	_, removed, _, _, _ := h.snapshot()
	if len(removed) == 0 {
		t.Error("the warm kernel the core refused to give was not removed")
	}
	b.Drain()
}
