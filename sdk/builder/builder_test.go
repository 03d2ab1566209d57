package builder

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := PlanRequest{Language: "python", BaseImage: "mcp-forge/python:3.11", Packages: []Package{{Name: "numpy", Version: "==1.24.2"}, {Name: "scikit-learn", Version: ">=1,<2"}, {Name: "data.table"}},
		Index: Index{URL: "https://pypi.org/simple"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*PlanRequest)
		says string
	}{
		{"option as name", func(r *PlanRequest) { r.Packages[0].Name = "--index-url=https://x" }, "not a package name"},
		{"command in name", func(r *PlanRequest) { r.Packages[0].Name = "numpy;id" }, "not a package name"},
		{"path as name", func(r *PlanRequest) { r.Packages[0].Name = "../x" }, "not a package name"},
		{"command in version", func(r *PlanRequest) { r.Packages[0].Version = "1; id" }, "not a version constraint"},
		{"duplicate", func(r *PlanRequest) { r.Packages[1].Name = "NumPy" }, "listed twice"},
		{"no language", func(r *PlanRequest) { r.Language = "" }, "not a language id"},
		{"image with space", func(r *PlanRequest) { r.BaseImage = "a b" }, "not an image reference"},
		{"plain http index", func(r *PlanRequest) { r.Index.ExtraURLs = []string{"http://x"} }, "not https"},
		{"plain http to a lookalike of loopback", func(r *PlanRequest) { r.Index.URL = "http://127.0.0.1.evil.example/simple" }, "not https"},
		{"plain http with loopback as user info", func(r *PlanRequest) { r.Index.URL = "http://127.0.0.1@evil.example/simple" }, "not https"},
		{"file index", func(r *PlanRequest) { r.Index.URL = "file:///srv/wheels" }, "not https"},
		{"index as option", func(r *PlanRequest) { r.Index.URL = "--index-url=https://x" }, "starts with '-'"},
	}
	// Loopback indexes (the tests' local index, a mirror on this host) are
	// accepted.
	for _, edit := range []func(*PlanRequest){
		func(r *PlanRequest) { r.Index.URL = "http://127.0.0.1:8080/simple" },
		func(r *PlanRequest) { r.Index.URL = "http://localhost/simple" },
		func(r *PlanRequest) { r.Index.ExtraURLs = []string{"http://[::1]:3141/root/pypi/+simple/"} },
		func(r *PlanRequest) { r.Index.URL = "http://user:pw@127.0.0.1:8080/simple" },
	} {
		r := ok
		edit(&r)
		if err := r.Validate(); err != nil {
			t.Errorf("index %+v refused: %v", r.Index, err)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			r.Packages = append([]Package(nil), ok.Packages...)
			c.edit(&r)
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("want an error saying %q, got %v", c.says, err)
			}
		})
	}
}
