package sandbox

import (
	"errors"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/policy"
)

func TestTracker(t *testing.T) {
	tr := NewTracker()
	tr.Add("abc", "python")
	if err := tr.Check("abc", "python", "stop"); err != nil {
		t.Fatal(err)
	}
	if err := tr.Check("abc", "", "stop"); err != nil {
		t.Fatal("the core may act on any tracked container")
	}
	var v *policy.Violation
	if err := tr.Check("abc", "jupyter", "stop"); !errors.As(err, &v) || v.Rule != "not-owner" {
		t.Fatalf("other plugin: %v", err)
	}
	if err := tr.Check("zzz", "python", "remove"); !errors.As(err, &v) || v.Rule != "not-our-container" {
		t.Fatalf("untracked: %v", err)
	}
	tr.Remove("abc")
	if err := tr.Check("abc", "python", "stop"); err == nil {
		t.Fatal("removed container still tracked")
	}
}
