package workspace

import (
	"errors"
	"strings"
	"testing"
)

type refusingProv struct{ enforced bool }

func (p refusingProv) Provision(string, int64, int, int) error {
	return errors.New("the workspace quota cannot be enforced on this host")
}
func (p refusingProv) Release(string) error { return nil }
func (p refusingProv) Enforced() bool       { return p.enforced }

// A refused workspace names the setting that decides it.
func TestQuotaRefusalNamesSetting(t *testing.T) {
	m := New(t.TempDir(), "tag", 1<<20, refusingProv{})
	_, err := m.Create("s")
	if err == nil || !strings.Contains(err.Error(), `security.waive = ["workspace-quota"]`) {
		t.Fatalf("want the refusal to name the workspace-quota waiver, got %v", err)
	}
	m = New(t.TempDir(), "tag", 1<<20, refusingProv{enforced: true})
	if _, err := m.Create("s"); err == nil || strings.Contains(err.Error(), "security.waive") {
		t.Fatalf("an enforcing provisioner's own failure is not a quota refusal: %v", err)
	}
}
