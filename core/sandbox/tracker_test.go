package sandbox

import (
	"errors"
	"fmt"
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
	var gone *RemovedError
	if err := tr.Check("abc", "python", "stop"); !errors.As(err, &gone) {
		t.Fatalf("removed container: %v", err)
	}
	if err := tr.Check("abc", "jupyter", "remove"); !errors.As(err, &v) || v.Rule != "not-owner" {
		t.Fatalf("another plugin, removed container: %v", err)
	}
}

// The memory of removed containers is bounded.
func TestTrackerForgetsOldRemovals(t *testing.T) {
	tr := NewTracker()
	for i := 0; i <= recentMax; i++ {
		id := fmt.Sprint("c", i)
		tr.Add(id, "p")
		tr.Remove(id)
	}
	var v *policy.Violation
	if err := tr.Check("c0", "p", "remove"); !errors.As(err, &v) || v.Rule != "not-our-container" {
		t.Fatalf("oldest removal still remembered: %v", err)
	}
	var gone *RemovedError
	if err := tr.Check(fmt.Sprint("c", recentMax), "p", "remove"); !errors.As(err, &gone) {
		t.Fatalf("newest removal forgotten: %v", err)
	}
	if len(tr.recent) != recentMax || len(tr.order) != recentMax {
		t.Fatalf("remembers %d/%d", len(tr.recent), len(tr.order))
	}
}
