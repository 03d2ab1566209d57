package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckResolvedImage(t *testing.T) {
	p := New(testSettings("/b"), nil)
	d := "sha256:" + strings.Repeat("ab", 32)
	cases := []struct {
		image   string
		names   []string
		digests []string
		ok      bool
	}{
		{"mcp-forge/python:3.11", []string{"localhost/mcp-forge/python:3.11"}, []string{d}, true},
		{"mcp-forge/python:3.11", []string{"docker.io/mcp-forge/python:3.11"}, nil, false},
		{"mcp-forge/python:3.11", []string{"localhost/mcp-forge/r:4.2"}, []string{d}, false},
		{"mcp-forge/python:3.11@" + d, []string{"localhost/mcp-forge/r:4.2"}, []string{d}, false}, // refused before resolution
		{"mcp-forge/r:4.2", []string{"localhost/mcp-forge/r:4.2"}, nil, false},                    // not in this allowlist
	}
	for _, tc := range cases {
		err := p.CheckResolvedImage(tc.image, "f371ca1655e034de", tc.names, tc.digests)
		if tc.ok {
			if err != nil {
				t.Errorf("%s → %v: %v", tc.image, tc.names, err)
			}
			continue
		}
		var v *Violation
		if !errors.As(err, &v) || v.Rule != "image-not-allowed" {
			t.Errorf("%s → %v: want image-not-allowed, got %v", tc.image, tc.names, err)
		}
	}
}

// With no profile configured nothing runs: the rule fails closed.
func TestSeccompRequiredEvenWhenUnconfigured(t *testing.T) {
	st := testSettings("/b")
	st.Seccomp = ""
	p := New(st, nil)
	_, err := p.Harden(Intent{Image: "mcp-forge/python:3.11", Limits: st.Defaults, Plugin: "x"})
	var v *Violation
	if !errors.As(err, &v) || v.Rule != "seccomp" {
		t.Fatalf("want seccomp violation, got %v", err)
	}
}
