package images

import (
	"strings"
	"testing"
)

func TestImageRef(t *testing.T) {
	cases := []struct{ registry, name, want string }{
		{"", "mcp-forge/python:3.11", "localhost/mcp-forge/python:3.11"},
		{"", "localhost/mcp-forge/python:3.11", "localhost/mcp-forge/python:3.11"},
		{"", "registry.example.org/team/python:3.11", "registry.example.org/team/python:3.11"},
		{"", "registry:5000/python:3.11", "registry:5000/python:3.11"},
		{"registry.example.org/team", "mcp-forge/python:3.11", "registry.example.org/team/mcp-forge/python:3.11"},
		{"registry.example.org/team", "localhost/mcp-forge/python:3.11", "registry.example.org/team/mcp-forge/python:3.11"},
		// Names the registry gave (an image ID by digest, a listed tag) are left as they are.
		{"127.0.0.1:5000", "127.0.0.1:5000/mcp-forge/custom@sha256:" + strings.Repeat("ab", 32), "127.0.0.1:5000/mcp-forge/custom@sha256:" + strings.Repeat("ab", 32)},
		{"registry.example.org/team", "registry.example.org/team/mcp-forge/custom:x", "registry.example.org/team/mcp-forge/custom:x"},
		{"registry.example.org/team", "registry.example.org/teamx/python:1", "registry.example.org/team/registry.example.org/teamx/python:1"},
	}
	for _, tc := range cases {
		if got := Ref(tc.registry, tc.name); got != tc.want {
			t.Errorf("Ref(%q, %q) = %q, want %q", tc.registry, tc.name, got, tc.want)
		}
	}
}
