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
