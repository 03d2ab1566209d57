package httpe2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/audit"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A tenant that requires gVisor (tenants.NAME.isolation) gets it for its
// stateless runs, its sessions and their forks, on a server whose own
// isolation is runc; another tenant of the same server does not. Nothing
// in a call can lower it: the tool has no isolation argument, and its
// containers' audit lines say gvisor. Its later runs and sessions are
// served warm from sandboxes of its class, under gVisor still.
func TestTenantRequiresGVisor(t *testing.T) {
	if testenv.GVisor() || testenv.Kube() {
		t.Skip("the server's own isolation must be runc on Podman (make test's first leg)")
	}
	if _, err := os.Stat(config.DefaultRunsc); err != nil {
		t.Skip("runsc is not installed (make setup installs it)")
	}
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	tenants = strings.Replace(tenants, "[tenants.alice]\n", "[tenants.alice]\nisolation = \"gvisor\"\n", 1)
	s := testenv.StartHTTP(t, tenants+testenv.DefaultPools)
	type result struct {
		Stdout    string `json:"stdout"`
		Isolation string `json:"isolation"`
	}
	const probe = "print(open('/proc/version').read())"
	for name, want := range map[string]string{"alice": "gvisor", "bob": "container"} {
		cs, err := s.Connect(t, keys[name], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range []map[string]any{
			{"code": probe},
			{"code": probe, "session_id": "s"},
			{"code": probe, "isolation": "container"}, // not an argument: refused, never obeyed
		} {
			var o result
			res := testenv.Call(t, cs, "execute_python", args, &o)
			if _, lower := args["isolation"]; lower {
				if !res.IsError {
					t.Errorf("%s: an isolation argument was accepted: %s", name, testenv.Text(res))
				}
				continue
			}
			if res.IsError || o.Isolation != want || strings.Contains(o.Stdout, "gvisor") != (want == "gvisor") {
				t.Errorf("%s %v: isolation %q, /proc/version %q; want %s: %s", name, args["session_id"], o.Isolation, o.Stdout, want, testenv.Text(res))
			}
		}
		var fk struct {
			SessionID string `json:"session_id"`
		}
		if res := testenv.Call(t, cs, "fork_session", map[string]any{"session_id": "s", "new_session_id": "f"}, &fk); res.IsError {
			t.Fatalf("%s: fork: %s", name, testenv.Text(res))
		}
		var o result
		if res := testenv.Call(t, cs, "execute_python", map[string]any{"code": probe, "session_id": "f"}, &o); res.IsError || o.Isolation != want || strings.Contains(o.Stdout, "gvisor") != (want == "gvisor") {
			t.Errorf("%s's fork: isolation %q, /proc/version %q; want %s", name, o.Isolation, o.Stdout, want)
		}
		if name == "alice" {
			warmClass(t, cs, s.AuditLog, probe)
		}
		cs.Close()
	}
}

// warmClass: once a strict tenant's runs and sessions met the pools, the
// pools keep sandboxes of its class (created with the standing grant of
// gVisor), and its later runs and sessions are served warm, each still
// under gVisor.
func warmClass(t *testing.T, cs *mcp.ClientSession, auditLog, probe string) {
	t.Helper()
	type result struct {
		Stdout    string `json:"stdout"`
		Isolation string `json:"isolation"`
	}
	hits := func() int64 {
		if p := testenv.Pool(t, cs, "python"); p != nil {
			return p.Hits
		}
		return 0
	}
	warmSessions := func() int {
		n := 0
		for _, e := range testenv.AuditEntries(t, auditLog) {
			if e.Event == audit.SessionCreate && e.Details["warm"] == true {
				n++
			}
		}
		return n
	}
	check := func(what string, args map[string]any) {
		t.Helper()
		var o result
		if res := testenv.Call(t, cs, "execute_python", args, &o); res.IsError || o.Isolation != "gvisor" || !strings.Contains(o.Stdout, "gvisor") {
			t.Fatalf("alice's %s: isolation %q, /proc/version %q: %s", what, o.Isolation, o.Stdout, testenv.Text(res))
		}
	}
	h0, w0 := hits(), warmSessions()
	gotRun, gotSession := false, false
	for i := 0; i < 8 && !(gotRun && gotSession); i++ {
		time.Sleep(2 * time.Second) // the pools start the class's sandboxes
		check("run", map[string]any{"code": probe})
		gotRun = gotRun || hits() > h0
		id := fmt.Sprintf("w%d", i)
		check("session", map[string]any{"code": probe, "session_id": id})
		testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": id}, nil)
		gotSession = gotSession || warmSessions() > w0
	}
	if !gotRun || !gotSession {
		t.Errorf("alice's later runs served warm: %v, sessions: %v; want both (the pools keep gVisor sandboxes of her class)", gotRun, gotSession)
	}
}
