package sandboxes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/sandboxgrant"
)

type refuser struct{ rules []string }

func (r *refuser) Refuse(client, sessionID, tool string, err error, details map[string]any) error {
	var re *refusal.Error
	if errors.As(err, &re) {
		r.rules = append(r.rules, re.Rule)
	}
	return err
}

type recorder struct{ entries []audit.Entry }

func (r *recorder) Record(e audit.Entry) { r.entries = append(r.entries, e) }

func roots(t *testing.T) *hostroots.Roots {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"data", "team", "claimed"} {
		os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	rs, err := hostroots.New(map[string]config.HostRoot{"data": {Path: filepath.Join(dir, "data")}, "team": {Path: filepath.Join(dir, "team"), Tenants: []string{"alice"}},
		"claimed": {Path: filepath.Join(dir, "claimed"), Claim: "data-pvc", Tenants: []string{"strict", "local"}}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// What a call may ask for: nothing without roots, a runtime or backend
// that cannot mount, an unknown or another's root, too many; each refusal
// with its rule; a root named twice is mounted once. A tenant that
// requires gVisor gets it with or without roots, and is refused by a
// backend that cannot be told.
func TestResolve(t *testing.T) {
	rs := roots(t)
	many := make([]string, maxRoots+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	with := func(claimsOnly bool) *Sandboxes {
		return New(sandboxgrant.New(), nil, nil, map[string]string{"strict": "gvisor"}, rs, claimsOnly)
	}
	without := New(sandboxgrant.New(), nil, nil, map[string]string{"strict": "gvisor"}, nil, false)
	for _, tc := range []struct {
		name      string
		s         *Sandboxes
		ask       Ask
		rule      string
		roots     int
		isolation string
	}{
		{"nothing asked", without, Ask{}, "", 0, ""},
		{"no roots", without, Ask{Roots: []string{"data"}, BackendGrants: true}, RuleUnavailable, 0, ""},
		{"a cluster, no claim", with(true), Ask{Roots: []string{"data"}, Client: "local", BackendGrants: true}, RuleUnavailable, 0, ""},
		{"a cluster, a claim", with(true), Ask{Roots: []string{"claimed"}, Client: "local", BackendGrants: true}, "", 1, ""},
		{"a backend that cannot", with(false), Ask{Roots: []string{"data"}, Client: "local"}, RuleUnavailable, 0, ""},
		{"unknown", with(false), Ask{Roots: []string{"home"}, Client: "local", BackendGrants: true}, hostroots.RuleUnknown, 0, ""},
		{"another's", with(false), Ask{Roots: []string{"team"}, Client: "local", BackendGrants: true}, hostroots.RuleUnknown, 0, ""},
		{"too many", with(false), Ask{Roots: many, Client: "local", BackendGrants: true}, RuleUnavailable, 0, ""},
		{"twice", with(false), Ask{Roots: []string{"data", "data"}, Client: "local", BackendGrants: true}, "", 1, ""},
		{"a tenant's own", with(false), Ask{Roots: []string{"team"}, Client: "alice", BackendGrants: true}, "", 1, ""},
		{"a strict tenant", without, Ask{Client: "strict", BackendGrants: true}, "", 0, "gvisor"},
		{"a strict tenant with roots", with(false), Ask{Client: "strict", Roots: []string{"claimed"}, BackendGrants: true}, "", 1, "gvisor"},
		{"a strict tenant, a backend that cannot", without, Ask{Client: "strict"}, RuleIsolation, 0, ""},
		{"another tenant", without, Ask{Client: "alice"}, "", 0, ""},
	} {
		got, err := tc.s.Resolve(tc.ask)
		var re *refusal.Error
		switch {
		case tc.rule == "" && (err != nil || len(got.Roots) != tc.roots || got.Isolation != tc.isolation):
			t.Errorf("%s: %+v, %v; want %d roots, isolation %q", tc.name, got, err, tc.roots, tc.isolation)
		case tc.rule != "" && (!errors.As(err, &re) || re.Rule != tc.rule):
			t.Errorf("%s: %v, want rule %s", tc.name, err, tc.rule)
		}
	}
}

// A grant of roots is audited with the roots and where they are; one of
// an isolation alone is not mounted anywhere and says nothing; a session
// refuses roots it did not start with.
func TestGrantAndSession(t *testing.T) {
	rs := roots(t)
	rec, ref := &recorder{}, &refuser{}
	reg := sandboxgrant.New()
	s := New(reg, rec, ref, map[string]string{"strict": "gvisor"}, rs, false)
	need, err := s.Resolve(Ask{Roots: []string{"data"}, Client: "local", BackendGrants: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Grant(Ask{Client: "local", Run: "r1", Tool: "execute_python", Backend: "python"}, need)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.entries) != 1 || rec.entries[0].Event != EventMount || !strings.Contains(strings.Join(rec.entries[0].Details["mounted_at"].([]string), " "), "data at /mnt/data") {
		t.Fatalf("audit: %+v", rec.entries)
	}
	if n := Notice(g, "python"); !strings.Contains(n, "did not pass the grant") {
		t.Errorf("a grant nothing mounted: %q", n)
	}
	strict, _ := s.Resolve(Ask{Client: "strict", BackendGrants: true})
	gi, err := s.Grant(Ask{Client: "bob", Backend: "python"}, strict)
	if err != nil || gi.Isolation() != "gvisor" || Notice(gi, "python") != "" || len(rec.entries) != 1 {
		t.Errorf("an isolation grant: %v %q %q, %d audit lines", err, gi.Isolation(), Notice(gi, "python"), len(rec.entries))
	}
	for _, tc := range []struct {
		name    string
		g       *sandboxgrant.Grant
		asked   []string
		created bool
		refused bool
	}{
		{"its own", g, []string{"data"}, false, false},
		{"none asked", nil, nil, false, false},
		{"the first call", nil, []string{"data"}, true, false},
		{"started without", nil, []string{"data"}, false, true},
		{"started with an isolation only", gi, []string{"data"}, false, true},
		{"another", g, []string{"team"}, false, true},
	} {
		err := SessionCheck(tc.g, tc.asked, tc.created, "s")
		var re *refusal.Error
		if got := errors.As(err, &re) && re.Rule == RuleSession; got != tc.refused {
			t.Errorf("%s: %v, refused want %v", tc.name, err, tc.refused)
		}
	}
	s.Close(g)
	if _, err := reg.Lookup("python", g.Token()); err == nil {
		t.Error("a closed grant is live")
	}
}
