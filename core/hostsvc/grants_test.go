package hostsvc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// A container intent naming a tool grant the core did not issue to this
// plugin is refused as a policy error and audited with the rule, before
// any workspace or container exists.
func TestCreateRefusesForeignGrant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grants GrantFunc
		want   string
	}{
		{"no bridge", nil, "serves no tool grants"},
		{"not issued to this plugin", func(owner, token string) (*toolbridge.Grant, error) {
			return nil, errors.New("tools grant " + token + " is not one the core issued to plugin " + owner)
		}, "not one the core issued to plugin python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rec{}
			h := New("python", nil, r, nil) // no sandbox or workspaces: the refusal comes first
			if tc.grants != nil {
				h.SetGrants(tc.grants)
			}
			_, err := h.Create(context.Background(), host.Intent{Image: "x", ToolsGrant: "abc"})
			var he *host.Error
			if !errors.As(err, &he) || he.Kind != host.KindPolicy || !strings.Contains(he.Message, tc.want) {
				t.Fatalf("got %v", err)
			}
			if len(r.e) != 1 || r.e[0].Event != audit.SecurityViolation || r.e[0].Details["rule"] != toolbridge.RuleNotGranted {
				t.Fatalf("audit %+v", r.e)
			}
		})
	}
}

// A pooled container created with a plugin's standing grant is given to one
// run of its class (Claim): the run's grant then holds it. Claiming it
// again, claiming a container created otherwise or another plugin's, or
// with a token not issued to the plugin, is refused as a policy error and
// audited with its rule.
func TestClaimPooledContainer(t *testing.T) {
	r := newRig(t, 0)
	reg := sandboxgrant.New()
	r.h.SetSandboxGrants(reg.Lookup)
	other := r.plugin("r")
	other.SetSandboxGrants(reg.Lookup)
	run1, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	run2, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	pooled := intent("sleep", "60")
	pooled.SandboxGrant = run1.PoolToken()
	c, err := r.h.Create(context.Background(), pooled)
	if err != nil {
		t.Fatalf("create with the standing grant: %v", err)
	}
	plain, err := r.h.Create(context.Background(), intent("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.h.Claim(ctx, c.ID, run1.Token()); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if !run1.Holds(c.ID) || run1.Mounted() != 1 {
		t.Fatal("the run's grant does not hold the claimed container")
	}
	for _, tc := range []struct {
		name  string
		h     *Host
		id    string
		token string
		rule  string
	}{
		{"claimed again", r.h, c.ID, run2.Token(), sandboxgrant.RuleClaim},
		{"created without the standing grant", r.h, plain.ID, run2.Token(), sandboxgrant.RuleClaim},
		{"a token not issued", r.h, plain.ID, "nope", sandboxgrant.RuleNotGranted},
		{"another plugin's container", other, c.ID, run2.Token(), sandboxgrant.RuleNotGranted},
	} {
		r.rec.mu.Lock()
		r.rec.e = nil
		r.rec.mu.Unlock()
		err := tc.h.Claim(ctx, tc.id, tc.token)
		if kindOf(err) != host.KindPolicy {
			t.Errorf("%s: %v, want a policy error", tc.name, err)
		}
		if v := r.rec.find(audit.SecurityViolation); len(v) != 1 || v[0].Details["rule"] != tc.rule {
			t.Errorf("%s: audit %+v, want one violation %s", tc.name, v, tc.rule)
		}
	}
	if run2.Mounted() != 0 {
		t.Error("a refused claim counted")
	}
}

// A plugin's isolation floor (a builder's, when a tenant is held to
// gVisor) hardens every container it creates without a grant of its own.
func TestIsolationFloor(t *testing.T) {
	r := newRig(t, 0)
	floor := ""
	r.h.SetIsolationFloor(func() string { return floor })
	for _, want := range []string{"", "gvisor"} {
		floor = want
		if _, err := r.h.Create(context.Background(), intent("true")); err != nil {
			t.Fatal(err)
		}
		specs := r.rt.Specs()
		got := specs[len(specs)-1].Isolation
		if want == "" && got == "gvisor" || want == "gvisor" && got != "gvisor" {
			t.Errorf("floor %q: the container runs under %q", want, got)
		}
	}
}
