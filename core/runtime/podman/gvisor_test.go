package podman

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Only the states of containers Podman says are gone are swept; a failure
// to ask keeps a state, and a file of another shape is left alone.
func TestSweepStates(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"aa_sandbox:aa.state", "aa_sandbox:aa.lock", "bb_sandbox:cc.state", "dd_sandbox:dd.state", "ee_sandbox:ee.state", "null-netns", "odd.state"} {
		if err := os.WriteFile(filepath.Join(root, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	known := map[string]bool{"aa": true}
	var removed []string
	gone := sweepStates(root, func(id string) (bool, error) {
		if id == "ee" {
			return false, errors.New("the service did not answer")
		}
		return known[id], nil
	}, func(id string) error {
		removed = append(removed, id)
		if id == "dd" {
			return errors.New("runsc delete failed")
		}
		return nil
	})
	if strings.Join(gone, ",") != "cc" || strings.Join(removed, ",") != "cc,dd" {
		t.Fatalf("swept %v (removal asked for %v); want cc (and cc, dd asked)", gone, removed)
	}
}
