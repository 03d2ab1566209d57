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
// as a violation, when no container was created with the grant or a
// pre-started kernel stands in for it; a grant without an isolation asks
// nothing of the backend.
func TestHonoured(t *testing.T) {
	reg := sandboxgrant.New()
	strict, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	used, _ := reg.Issue("python", sandboxgrant.Spec{Isolation: "gvisor"})
	used.Mounts() // a container was created with it
	plain, _ := reg.Issue("python", sandboxgrant.Spec{})
	for _, tc := range []struct {
		name    string
		g       *sandboxgrant.Grant
		warm    bool
		refused bool
	}{
		{"no grant", nil, false, false},
		{"an isolation nothing was created with", strict, false, true},
		{"an isolation a container was created with", used, false, false},
		{"a warm kernel for an isolation", used, true, true},
		{"no isolation", plain, true, false},
	} {
		rec := &recorder{}
		i := &Issuer{Rec: rec}
		err := i.Honoured(&session.Session{ID: "s", Backend: "python", SandboxGrant: tc.g}, tc.warm)
		if (err != nil) != tc.refused || (len(rec.entries) == 1) != tc.refused {
			t.Errorf("%s: %v, %d audit lines; refused want %v", tc.name, err, len(rec.entries), tc.refused)
		}
		if tc.refused && (rec.entries[0].Event != audit.SecurityViolation || rec.entries[0].Details["rule"] != RuleIsolation) {
			t.Errorf("%s: audit %+v", tc.name, rec.entries[0])
		}
		if tc.warm {
			continue
		}
		rec.entries = nil
		err = i.RunHonoured("c", "python", tc.g)
		if (err != nil) != tc.refused || (tc.refused && !strings.Contains(err.Error(), "withheld")) {
			t.Errorf("%s, a run: %v; refused want %v", tc.name, err, tc.refused)
		}
	}
}
