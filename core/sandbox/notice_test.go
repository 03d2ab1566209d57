package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// A run allowed with enforcement off on a host that cannot enforce limits
// must say so; nothing is said where limits are enforced.
func TestLimitsNotice(t *testing.T) {
	for _, c := range []struct {
		name    string
		info    runtime.Info
		enforce bool
		want    string
	}{
		{"rootless v1, enforcement off", runtime.Info{Rootless: true}, false, LimitsNotEnforced},
		{"rootless v2", runtime.Info{Rootless: true, CgroupsV2: true}, false, ""},
		{"rootful v1", runtime.Info{}, false, ""},
		{"rootful v1 enforcing", runtime.Info{}, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _ := newTestManager(t, &fakeRuntime{info: c.info}, c.enforce)
			if n := m.LimitsNotice(); n != "" {
				t.Fatalf("notice before any run: %q", n)
			}
			if _, err := m.Create(context.Background(), intent(m)); err != nil {
				t.Fatal(err)
			}
			if got := m.LimitsNotice(); got != c.want {
				t.Fatalf("notice %q, want %q", got, c.want)
			}
		})
	}
}

// The fail-closed refusal is audited with its rule's name.
func TestLimitsRefusalAuditedWithRule(t *testing.T) {
	m, rec := newTestManager(t, &fakeRuntime{info: runtime.Info{Rootless: true}}, true)
	_, err := m.Create(context.Background(), intent(m))
	if !errors.Is(err, ErrLimitsUnenforceable) {
		t.Fatalf("want refusal, got %v", err)
	}
	for _, e := range rec.entries {
		if e.Details["rule"] == RuleLimitsUnenforceable {
			return
		}
	}
	t.Fatalf("no audit entry names rule %s: %+v", RuleLimitsUnenforceable, rec.entries)
}
