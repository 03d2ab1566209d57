package imageref

import (
	"errors"
	"strings"
	"testing"
)

const (
	dA = "sha256:8b205cb21185e9e83ded9d77613afee49dc3ad123053057cb69b34b2da09b837"
	dB = "sha256:e6c07a4f47c7261f2aea95ec9e66cfa83169978b7f0ce6de28966c2f578093e1"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		want    Ref
		wantErr string
	}{
		{"mcp-forge/python:3.11", Ref{Name: "localhost/mcp-forge/python", Tag: "3.11"}, ""},
		{"localhost/mcp-forge/python:3.11", Ref{Name: "localhost/mcp-forge/python", Tag: "3.11"}, ""},
		{"mcp-forge/python", Ref{Name: "localhost/mcp-forge/python", Tag: "latest"}, ""},
		{"python:3", Ref{Name: "localhost/python", Tag: "3"}, ""},
		{"docker.io/mcp-forge/python:3.11", Ref{Name: "docker.io/mcp-forge/python", Tag: "3.11"}, ""},
		{"docker.io/python:3", Ref{Name: "docker.io/library/python", Tag: "3"}, ""},
		{"evil.com/mcp-forge/python:3.11", Ref{Name: "evil.com/mcp-forge/python", Tag: "3.11"}, ""},
		{"localhost:5000/mcp-forge/python:3.11", Ref{Name: "localhost:5000/mcp-forge/python", Tag: "3.11"}, ""},
		{"mcp-forge/python:3.11@" + dA, Ref{Name: "localhost/mcp-forge/python", Tag: "3.11", Digest: dA}, ""},
		{"mcp-forge/python@" + dA, Ref{Name: "localhost/mcp-forge/python", Digest: dA}, ""},
		{"", Ref{}, "empty"},
		{" mcp-forge/python:3.11", Ref{}, "whitespace"},
		{"mcp-forge/python:3.11 ", Ref{}, "whitespace"},
		{"mcp-forge/python:3.11\n", Ref{}, "whitespace"},
		{"mcp-forge/python :3.11", Ref{}, "whitespace"},
		{"mcp-forge/python:", Ref{}, "invalid"},
		{"mcp-forge/python:3.11@", Ref{}, "invalid"},
		{"mcp-forge/python@sha256:abc", Ref{}, "invalid"},
		{"MCP-Forge/python:3.11", Ref{}, "lowercase"},
		{"mcp-forge/Python:3.11", Ref{}, "lowercase"},
		{"LOCALHOST/mcp-forge/python:3.11", Ref{}, "lowercase"},
		{"../mcp-forge/python:3.11", Ref{}, "invalid"},
		{"mcp-forge/../python:3.11", Ref{}, "invalid"},
		{"mcp-forge/./python:3.11", Ref{}, "invalid"},
		{"/mcp-forge/python:3.11", Ref{}, "invalid"},
		{"mcp-forge//python:3.11", Ref{}, "invalid"},
		{"mcp-forge/python:3.11:x", Ref{}, "invalid"},
		{"f371ca1655e034de00c919745caaf4668d90b4a8207fa83ee3c8acf66d9317f7", Ref{}, "image ID"},
		{dA, Ref{}, "image ID"},
	}
	for _, tc := range cases {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParsePattern(t *testing.T) {
	for _, tc := range []struct{ in, wantErr string }{
		{"mcp-forge/python:*", ""},
		{"mcp-forge/*:*", ""},
		{"quay.io/org/img:1.2", ""},
		{"localhost:5000/x:*", ""},
		{"mcp-forge/python@" + dA, ""},
		{"mcp-forge/python:3.11@" + dA, ""},
		{"mcp-forge/python", "no tag"},
		{"mcp-forge/*", "no tag"},
		{"mcp-forge/python:", "empty"},
		{"mcp-forge/python@sha256:xyz", "not a digest"},
		{"", "empty"},
		{" mcp-forge/python:*", "whitespace"},
		{"MCP-Forge/python:*", "lowercase"},
		{"mcp-forge/python:[", "glob"},
		{":*", "repository name is empty"},
	} {
		_, err := ParsePattern(tc.in)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ParsePattern(%q) = %v; want error %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestCheck(t *testing.T) {
	defaults := []string{"mcp-forge/python:*", "mcp-forge/r:*", "mcp-forge/custom:*"}
	pinned := []string{"mcp-forge/python:3.11@" + dA, "mcp-forge/r@" + dB, "quay.io/org/img:1.*"}
	cases := []struct {
		patterns []string
		image    string
		allowed  bool
		reason   string
	}{
		{defaults, "mcp-forge/python:3.11", true, ""},
		{defaults, "localhost/mcp-forge/python:3.11", true, ""},
		{defaults, "mcp-forge/custom:my-env", true, ""},
		{defaults, "mcp-forge/python", true, ""}, // :latest, still that repository
		// The hole: a digest selects any local image, whatever the name.
		{defaults, "mcp-forge/python:3.11@" + dA, false, "allowlist pins it"},
		{defaults, "mcp-forge/python@" + dA, false, "allowlist pins it"},
		{defaults, "localhost/mcp-forge/python:3.11@" + dA, false, "allowlist pins it"},
		// Other registries and look-alike names.
		{defaults, "docker.io/mcp-forge/python:3.11", false, "not matched"},
		{defaults, "evil.com/mcp-forge/python:3.11", false, "not matched"},
		{defaults, "localhost:5000/mcp-forge/python:3.11", false, "not matched"},
		{defaults, "evil.com/localhost/mcp-forge/python:3.11", false, "not matched"},
		{defaults, "mcp-forge/python-evil:3.11", false, "not matched"},
		{defaults, "mcp-forge/python/evil:3.11", false, "not matched"},
		{defaults, "mcp-forge/pythonx:3.11", false, "not matched"},
		{defaults, "x/mcp-forge/python:3.11", false, "not matched"},
		{defaults, "mcp-forge/r:4.2", true, ""},
		{defaults, "docker.io/library/alpine", false, "not matched"},
		// Case, whitespace, traversal, emptiness.
		{defaults, "MCP-FORGE/python:3.11", false, "lowercase"},
		{defaults, "Localhost/mcp-forge/python:3.11", false, "lowercase"},
		{defaults, "mcp-forge/python:3.11 ", false, "whitespace"},
		{defaults, "\tmcp-forge/python:3.11", false, "whitespace"},
		{defaults, "mcp-forge/../r:4.2", false, "invalid"},
		{defaults, "mcp-forge/python:", false, "invalid"},
		{defaults, "", false, "empty"},
		{defaults, "sha256:" + strings.Repeat("a", 64), false, "image ID"},
		// Pinned digests.
		{pinned, "mcp-forge/python:3.11@" + dA, true, ""},
		{pinned, "localhost/mcp-forge/python:3.11@" + dA, true, ""},
		{pinned, "mcp-forge/python@" + dA, true, ""},
		{pinned, "mcp-forge/python:3.12@" + dA, false, "pins it"},
		{pinned, "mcp-forge/python:3.11@" + dB, false, "pins it"},
		{pinned, "mcp-forge/python:3.11", false, "not matched"}, // the pin names one image only
		{pinned, "mcp-forge/r:anything@" + dB, true, ""},
		{pinned, "mcp-forge/r@" + dA, false, "pins it"},
		{pinned, "quay.io/org/img:1.2", true, ""},
		{pinned, "quay.io/org/img:2.0", false, "not matched"},
		{pinned, "org/img:1.2", false, "not matched"},
	}
	for _, tc := range cases {
		_, err := Check(tc.patterns, tc.image)
		if tc.allowed {
			if err != nil {
				t.Errorf("%q refused by %v: %v", tc.image, tc.patterns, err)
			}
			continue
		}
		var na *NotAllowedError
		if !errors.As(err, &na) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%q by %v: got %v, want refusal containing %q", tc.image, tc.patterns, err, tc.reason)
		}
	}
}

func TestCheckResolved(t *testing.T) {
	py := []string{"localhost/mcp-forge/python:3.11"}
	cases := []struct {
		image   string
		names   []string
		digests []string
		ok      bool
	}{
		{"mcp-forge/python:3.11", py, []string{dA}, true},
		{"mcp-forge/python:3.11", []string{"localhost/mcp-forge/python:3.11", "localhost/other:1"}, nil, true},
		// Podman picked docker.io's image for the short name.
		{"mcp-forge/python:3.11", []string{"docker.io/mcp-forge/python:3.11"}, nil, false},
		// A short name that Podman took for an image ID prefix.
		{"f371ca1655e0", []string{"localhost/mcp-forge/r:4.2"}, nil, false},
		{"mcp-forge/python:3.11", nil, nil, false},
		{"mcp-forge/python@" + dA, py, []string{dA, "localhost/mcp-forge/python@" + dA}, true},
		{"mcp-forge/python@" + dA, py, []string{"localhost/mcp-forge/python@" + dA}, true},
		{"mcp-forge/python@" + dA, py, []string{dB}, false},
		{"mcp-forge/python@" + dA, []string{"localhost/mcp-forge/r:4.2"}, []string{dA}, false},
	}
	for _, tc := range cases {
		r, err := Parse(tc.image)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckResolved(r, tc.names, tc.digests)
		if (err == nil) != tc.ok {
			t.Errorf("%s resolved to %v %v: err %v, want ok=%v", tc.image, tc.names, tc.digests, err, tc.ok)
		}
	}
}
