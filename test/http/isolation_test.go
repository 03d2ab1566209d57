package httpe2e

import (
	"os"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A tenant that requires gVisor (tenants.NAME.isolation) gets it for its
// stateless runs, its sessions and their forks, on a server whose own
// isolation is runc; another tenant of the same server does not. Nothing
// in a call can lower it: the tool has no isolation argument, and its
// containers' audit lines say gvisor.
func TestTenantRequiresGVisor(t *testing.T) {
	if testenv.GVisor() || testenv.Kube() {
		t.Skip("the server's own isolation must be runc on Podman (make test's first leg)")
	}
	if _, err := os.Stat(config.DefaultRunsc); err != nil {
		t.Skip("runsc is not installed (make setup installs it)")
	}
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	tenants = strings.Replace(tenants, "[tenants.alice]\n", "[tenants.alice]\nisolation = \"gvisor\"\n", 1)
	s := testenv.StartHTTP(t, tenants)
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
		cs.Close()
	}
}
