package mounts

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
		"claimed": {Path: filepath.Join(dir, "claimed"), Claim: "data-pvc"}}, "local")
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// What a call may ask for: nothing without roots, a runtime or backend
// that cannot mount, an unknown or another's root, too many; each refusal
// with its rule; a root named twice is mounted once.
func TestResolve(t *testing.T) {
	rs := roots(t)
	many := make([]string, maxRoots+1)
	for i := range many {
		many[i] = string(rune('a' + i))
	}
	for _, tc := range []struct {
		name   string
		m      *Mounts
		ask    Ask
		rule   string
		mounts int
	}{
		{"nothing asked", nil, Ask{}, "", 0},
		{"no roots", nil, Ask{Roots: []string{"data"}}, RuleUnavailable, 0},
		{"a cluster, no claim", New(rs, nil, nil, true), Ask{Roots: []string{"data"}, Client: "local", BackendMounts: true}, RuleUnavailable, 0},
		{"a cluster, a claim", New(rs, nil, nil, true), Ask{Roots: []string{"claimed"}, Client: "local", BackendMounts: true}, "", 1},
		{"a backend that cannot", New(rs, nil, nil, false), Ask{Roots: []string{"data"}, Client: "local"}, RuleUnavailable, 0},
		{"unknown", New(rs, nil, nil, false), Ask{Roots: []string{"home"}, Client: "local", BackendMounts: true}, hostroots.RuleUnknown, 0},
		{"another's", New(rs, nil, nil, false), Ask{Roots: []string{"team"}, Client: "local", BackendMounts: true}, hostroots.RuleUnknown, 0},
		{"too many", New(rs, nil, nil, false), Ask{Roots: many, Client: "local", BackendMounts: true}, RuleUnavailable, 0},
		{"twice", New(rs, nil, nil, false), Ask{Roots: []string{"data", "data"}, Client: "local", BackendMounts: true}, "", 1},
		{"a tenant's own", New(rs, nil, nil, false), Ask{Roots: []string{"team"}, Client: "alice", BackendMounts: true}, "", 1},
	} {
		got, err := tc.m.Resolve(tc.ask)
		var re *refusal.Error
		switch {
		case tc.rule == "" && (err != nil || len(got) != tc.mounts):
			t.Errorf("%s: %d roots, %v; want %d", tc.name, len(got), err, tc.mounts)
		case tc.rule != "" && (!errors.As(err, &re) || re.Rule != tc.rule):
			t.Errorf("%s: %v, want rule %s", tc.name, err, tc.rule)
		}
	}
}

// A grant is audited with the roots and where they are; a session refuses
// roots it did not start with.
func TestGrantAndSession(t *testing.T) {
	rs := roots(t)
	rec, ref := &recorder{}, &refuser{}
	m := New(rs, rec, ref, false)
	rr, err := m.Resolve(Ask{Roots: []string{"data"}, Client: "local", BackendMounts: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Grant(Ask{Client: "local", Run: "r1", Tool: "execute_python", Backend: "python"}, rr)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.entries) != 1 || rec.entries[0].Event != EventMount || !strings.Contains(strings.Join(rec.entries[0].Details["mounted_at"].([]string), " "), "data at /mnt/data") {
		t.Fatalf("audit: %+v", rec.entries)
	}
	if n := Notice(g, "python"); !strings.Contains(n, "did not pass the grant") {
		t.Errorf("a grant nothing mounted: %q", n)
	}
	for _, tc := range []struct {
		name    string
		g       *hostroots.Grant
		asked   []string
		created bool
		refused bool
	}{
		{"its own", g, []string{"data"}, false, false},
		{"none asked", nil, nil, false, false},
		{"the first call", nil, []string{"data"}, true, false},
		{"started without", nil, []string{"data"}, false, true},
		{"another", g, []string{"team"}, false, true},
	} {
		err := SessionCheck(tc.g, tc.asked, tc.created, "s")
		var re *refusal.Error
		if got := errors.As(err, &re) && re.Rule == RuleSession; got != tc.refused {
			t.Errorf("%s: %v, refused want %v", tc.name, err, tc.refused)
		}
	}
	m.Close(g)
	if _, err := rs.Lookup("python", g.Token()); err == nil {
		t.Error("a closed grant is live")
	}
}
