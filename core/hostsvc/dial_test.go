package hostsvc

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Every channel the core opens for a plugin, and every refusal, is in the
// audit log with its rule; an endpoint that is not listening yet is not
// (plugins poll it while the sandbox starts).
func TestDialAudit(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	in := intent("sleep", "60")
	in.Endpoints = []host.Endpoint{{Name: "s", Path: "/forge/work/s"}}
	c := r.start(t, in)
	if _, err := r.h.Dial(ctx, c.ID, "s"); kindOf(err) != host.KindUnavailable {
		t.Fatalf("Dial before listening = %v", err)
	}
	l, err := net.Listen("unix", filepath.Join(r.workspaceOf(c.ID), "work", "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := r.h.Dial(ctx, c.ID, "s")
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	r.h.Dial(ctx, c.ID, "nope")
	r.plugin("r").Dial(ctx, c.ID, "s")
	l.Close()
	os.Symlink("/run/podman/podman.sock", filepath.Join(r.workspaceOf(c.ID), "work", "s"))
	r.h.Dial(ctx, c.ID, "s")
	bad := intent("true")
	bad.Endpoints = []host.Endpoint{{Name: "x", Path: "/etc/x"}}
	if _, err := r.h.Create(ctx, bad); kindOf(err) != host.KindInvalid {
		t.Fatalf("Create with an endpoint outside the mounts = %v", err)
	}

	type line struct{ event, rule string }
	var got []line
	for _, e := range r.rec.e {
		if e.Event == audit.ChannelOpen || e.Event == audit.SecurityViolation || (e.Event == audit.ContainerCreate && !e.Success) {
			rule, _ := e.Details["rule"].(string)
			got = append(got, line{e.Event, rule})
		}
	}
	want := []line{
		{audit.ChannelOpen, ""},
		{audit.ChannelOpen, RuleEndpointUndeclared},
		{audit.ChannelOpen, RuleEndpointNotOwned},
		{audit.SecurityViolation, RuleEndpointLink},
		{audit.ContainerCreate, RuleEndpointIntent},
	}
	if len(got) != len(want) {
		t.Fatalf("audit lines %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("audit lines %v; want %v", got, want)
		}
	}
}

// What a plugin sends is cut before it is logged, and a channel the plugin
// connection refused (too many open) is audited under its rule.
func TestDialAuditBounded(t *testing.T) {
	r := newRig(t, 0)
	huge := strings.Repeat("x", 1<<20)
	if _, err := r.h.Dial(context.Background(), huge, huge); kindOf(err) != host.KindNotFound || len(err.Error()) > 1024 {
		t.Fatalf("Dial of a megabyte id: %d bytes of error, kind %s", len(err.Error()), kindOf(err))
	}
	r.h.RefuseChannel(huge, "s", host.Errorf(host.KindUnavailable, "too many"))
	lines := r.rec.find(audit.ChannelOpen)
	if len(lines) != 2 {
		t.Fatalf("%d channel.open lines, want 2", len(lines))
	}
	for _, e := range lines {
		if n := len(e.Details["container_id"].(string)) + len(e.Details["endpoint"].(string)) + len(e.Error); n > 1024 {
			t.Errorf("an audit line carries %d bytes of what the plugin sent", n)
		}
	}
	if lines[1].Details["rule"] != RuleEndpointLimit || lines[1].Success {
		t.Errorf("the refused channel's line: %+v", lines[1])
	}
}
