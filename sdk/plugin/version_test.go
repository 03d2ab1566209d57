package plugin

import (
	"strings"
	"testing"
)

// A core that offers no version this plugin serves gets a line naming both
// sides' versions and what to do; one that shares a version gets none.
func TestVersionMismatch(t *testing.T) {
	for _, tc := range []struct {
		offered string
		want    []string // "" none
	}{
		{"", nil},
		{"1,2", nil},
		{"2", nil},
		{"1", []string{"API version(s) [2]", "offers only 1", "upgrade MCP-Forge"}},
		{"3, 4", []string{"offers only 3, 4"}},
	} {
		got := versionMismatch("p", tc.offered)
		if (got == "") != (tc.want == nil) {
			t.Fatalf("versionMismatch(%q) = %q", tc.offered, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("versionMismatch(%q) = %q; want it to say %q", tc.offered, got, w)
			}
		}
	}
}
