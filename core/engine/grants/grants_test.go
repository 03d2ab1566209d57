package grants

import (
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
	"github.com/mcp-forge/mcp-forge/core/session"
)

type recorder struct{ entries []audit.Entry }

func (r *recorder) Record(e audit.Entry) { r.entries = append(r.entries, e) }

// A session or run whose grant requires an isolation is refused, audited
// as a violation, unless its container was created with the grant or a
// pooled one of the grant's class was claimed for it; a grant without an
// isolation asks nothing of the backend.
func TestHonoured(t *testing.T) {
	reg := sandboxgrant.New()
	strict, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	used, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	used.Created("c-cold")
	claimed, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	standing, _ := reg.Lookup("python", claimed.PoolToken())
	if err := claimed.Claim("c-pooled", standing, false); err != nil {
		t.Fatal(err)
	}
	plain, _ := reg.Issue("python", sandboxgrant.Spec{})
	for _, tc := range []struct {
		name      string
		g         *sandboxgrant.Grant
		container string
		refused   bool
	}{
		{"no grant", nil, "c", false},
		{"an isolation nothing was created with", strict, "c", true},
		{"an isolation its container was created with", used, "c-cold", false},
		{"another container than the one created with it", used, "c-other", true},
		{"a pooled container claimed for it", claimed, "c-pooled", false},
		{"no isolation", plain, "c", false},
	} {
		rec := &recorder{}
		i := &Issuer{Rec: rec}
		err := i.Honoured(&session.Session{ID: "s", Backend: "python", SandboxGrant: tc.g}, tc.container)
		if (err != nil) != tc.refused || (len(rec.entries) == 1) != tc.refused {
			t.Errorf("%s: %v, %d audit lines; refused want %v", tc.name, err, len(rec.entries), tc.refused)
		}
		if tc.refused && (rec.entries[0].Event != audit.SecurityViolation || rec.entries[0].Details["rule"] != RuleIsolation) {
			t.Errorf("%s: audit %+v", tc.name, rec.entries[0])
		}
	}
	for _, tc := range []struct {
		name    string
		g       *sandboxgrant.Grant
		refused bool
	}{
		{"no grant", nil, false},
		{"an isolation nothing was created with", strict, true},
		{"an isolation a container was created with", used, false},
		{"a pooled container claimed for it", claimed, false},
		{"no isolation", plain, false},
	} {
		err := (&Issuer{Rec: &recorder{}}).RunHonoured("c", "python", tc.g)
		if (err != nil) != tc.refused || (tc.refused && !strings.Contains(err.Error(), "withheld")) {
			t.Errorf("%s, a run: %v; refused want %v", tc.name, err, tc.refused)
		}
	}
}
