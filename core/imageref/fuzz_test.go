package imageref

import (
	"strings"
	"testing"
)

// FuzzCheck: whatever the allowlist of the default configuration admits is
// a local image of an allowed repository with a plain tag: no other
// registry, no digest (none is pinned), no whitespace or control character,
// and its normal form admits itself (the decision is stable).
func FuzzCheck(f *testing.F) {
	allowed := []string{"mcp-forge/python:*", "mcp-forge/r:*", "mcp-forge/custom:*"}
	for _, s := range []string{
		"mcp-forge/python:3.11", "localhost/mcp-forge/python:3.11", "MCP-Forge/python:3.11",
		"mcp-forge/python:3.11@sha256:" + strings.Repeat("0", 64), "docker.io/mcp-forge/python:3.11",
		"evil.com/mcp-forge/python:3.11", "mcp-forge/python:3.11/../../r:4.2", " mcp-forge/python:3.11",
		"mcp-forge/python", "mcp-forge/custom:x\n", "f371ca1655e0", "sha256:" + strings.Repeat("a", 64),
		"localhost:5000/mcp-forge/python:1", "mcp-forge/python:", "mcp-forge//python:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		r, err := Check(allowed, image)
		if err != nil {
			if _, ok := err.(*NotAllowedError); !ok {
				t.Fatalf("refusal of %q is %T, not *NotAllowedError", image, err)
			}
			return
		}
		if r.Digest != "" {
			t.Fatalf("%q admitted with digest %s that no pattern pins", image, r.Digest)
		}
		if !strings.HasPrefix(r.Name, LocalDomain+"/mcp-forge/") {
			t.Fatalf("%q admitted as %s, outside the local mcp-forge repositories", image, r.Name)
		}
		repo := strings.TrimPrefix(r.Name, LocalDomain+"/mcp-forge/")
		if repo != "python" && repo != "r" && repo != "custom" {
			t.Fatalf("%q admitted as repository %s", image, r.Name)
		}
		if strings.ContainsFunc(image, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			t.Fatalf("%q admitted with whitespace or a control character", image)
		}
		if again, err := Check(allowed, r.String()); err != nil || again != r {
			t.Fatalf("%q admitted as %s, whose normal form is judged %+v, %v", image, r, again, err)
		}
	})
}
