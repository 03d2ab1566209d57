package packages

import (
	"reflect"
	"strings"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"numpy":              "numpy",
		"Django":             "django",
		"zope.interface":     "zope-interface",
		"Foo__Bar.-baz":      "foo-bar-baz",
		"scikit_learn":       "scikit-learn",
		"A-._-B":             "a-b",
		"ruamel.yaml.clib":   "ruamel-yaml-clib",
		"typing_extensions":  "typing-extensions",
		"backports.zoneinfo": "backports-zoneinfo",
	} {
		if got := NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSpecAccepts(t *testing.T) {
	cases := []struct {
		lang      Language
		in        string
		canonical string
		key       string
	}{
		{Python, "numpy", "numpy", "numpy"},
		{Python, "NumPy", "numpy", "numpy"},
		{Python, "scikit_learn>=1.3", "scikit-learn>=1.3", "scikit-learn"},
		{Python, "zope.interface==6.0", "zope-interface==6.0", "zope-interface"},
		{Python, "numpy>=1.24,<2", "numpy>=1.24,<2", "numpy"},
		{Python, "  numpy >= 1.24 , < 2  ", "numpy>=1.24,<2", "numpy"},
		{Python, "pandas[Excel,plot]", "pandas[excel,plot]", "pandas"},
		{Python, "pandas[plot, excel, plot]==2.1.4", "pandas[excel,plot]==2.1.4", "pandas"},
		{Python, "pandas [ excel ] >=2", "pandas[excel]>=2", "pandas"},
		{Python, "requests~=2.31", "requests~=2.31", "requests"},
		{Python, "a!=1.0.*", "a!=1.0.*", "a"},
		{Python, "a==1.*", "a==1.*", "a"},
		{Python, "a==2.0RC1", "a==2.0rc1", "a"},
		{Python, "a>=1.0a1,<1.0b2", "a>=1.0a1,<1.0b2", "a"},
		{Python, "a==1.0.post2.dev3", "a==1.0.post2.dev3", "a"},
		{Python, "a==1!2.0", "a==1!2.0", "a"},
		{Python, "a==01.002", "a==1.2", "a"},
		{Python, "a<=0", "a<=0", "a"},
		{Python, "a>3", "a>3", "a"},
		{Python, "x9", "x9", "x9"},
		{Python, "9x", "9x", "9x"},
		{R, "ggplot2", "ggplot2", "ggplot2"},
		{R, "data.table", "data.table", "data-table"},
		{R, " Matrix ", "Matrix", "matrix"},
	}
	for _, tc := range cases {
		t.Run(string(tc.lang)+"/"+tc.in, func(t *testing.T) {
			s, err := ParseSpec(tc.lang, tc.in)
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			if got := s.String(); got != tc.canonical {
				t.Errorf("String() = %q, want %q", got, tc.canonical)
			}
			if s.Key != tc.key {
				t.Errorf("Key = %q, want %q", s.Key, tc.key)
			}
			again, err := ParseSpec(tc.lang, s.String())
			if err != nil || !reflect.DeepEqual(again, s) {
				t.Errorf("canonical %q re-parses to %+v, %v; want %+v", s.String(), again, err, s)
			}
		})
	}
}

func TestParseSpecConstraints(t *testing.T) {
	s, err := ParseSpec(Python, "numpy>=1.24,!=1.25.0,<2")
	if err != nil {
		t.Fatal(err)
	}
	want := []Constraint{{">=", "1.24"}, {"!=", "1.25.0"}, {"<", "2"}}
	if !reflect.DeepEqual(s.Constraints, want) {
		t.Fatalf("constraints %+v, want %+v", s.Constraints, want)
	}
}

func TestParseSpecRefuses(t *testing.T) {
	cases := []struct {
		name string
		lang Language
		in   string
		want string // substring of the error
	}{
		{"empty", Python, "", "is empty"},
		{"blank", Python, "   ", "is empty"},
		{"option index-url", Python, "--index-url=https://evil.example/simple", "starts with '-'"},
		{"option editable", Python, "-e .", "starts with '-'"},
		{"option after space", Python, " -r requirements.txt", "starts with '-'"},
		{"option as r", R, "-e", "starts with '-'"},
		{"url", Python, "https://evil.example/pkg.whl", "is a URL"},
		{"direct reference", Python, "pkg @ https://evil.example/pkg.whl", "direct reference"},
		{"direct reference file", Python, "pkg@file:///tmp/x.whl", "direct reference"},
		{"git", Python, "pkg @ git+ssh://git@host/x", "direct reference"},
		{"url without at", Python, "git+https://host/x", "is a URL"},
		{"marker", Python, "numpy; python_version<'3.12'", "environment marker"},
		{"marker spaced", Python, "numpy ; os_name == 'nt'", "environment marker"},
		{"relative path", Python, "./pkg", "file path"},
		{"dot path", Python, ".", "file path"},
		{"absolute path", Python, "/tmp/pkg.whl", "file path"},
		{"home path", Python, "~/pkg", "file path"},
		{"windows path", Python, `C:\pkg`, "file path"},
		{"dir", Python, "pkg/", "file path"},
		{"newline", Python, "numpy\n--index-url=x", "control character '\\n'"},
		{"carriage return", Python, "numpy\r", "control character '\\r'"},
		{"tab", Python, "numpy\t>=1", "control character '\\t'"},
		{"nul", Python, "numpy\x00", "control character '\\x00'"},
		{"del", Python, "numpy\x7f", "control character"},
		{"cyrillic a", Python, "p\u0430ndas", "non-ASCII character U+0430"},
		{"fullwidth", Python, "ｎumpy", "non-ASCII character U+FF4E"},
		{"zero width", Python, "num\u200bpy", "non-ASCII character U+200B"},
		{"invalid utf8", Python, "num\xffpy", "non-ASCII character"},
		{"too long", Python, strings.Repeat("a", MaxSpecLen+1), "more than 200"},
		{"long name", Python, strings.Repeat("a", MaxNameLen+1), "name, more than 100"},
		{"no name", Python, ">=1.0", "does not start with a package name"},
		{"underscore start", Python, "_numpy", "does not start with a package name"},
		{"trailing separator", Python, "numpy-", "version operator"},
		{"space in name", Python, "num py", "version operator"},
		{"bare version", Python, "numpy 1.24", "version operator"},
		{"parenthesised", Python, "numpy (>=1.24)", "parenthesised"},
		{"arbitrary equality", Python, "numpy===1.24", "'==='"},
		{"empty version", Python, "numpy>=", "is empty"},
		{"empty clause", Python, "numpy>=1,", "version operator"},
		{"double comma", Python, "numpy>=1,,<2", "version operator"},
		{"no comma", Python, "numpy>=1 <2", "',' or the end"},
		{"wildcard on >=", Python, "numpy>=1.*", "only after == and !="},
		{"compatible needs two", Python, "numpy~=1", "two release numbers"},
		{"compatible wildcard", Python, "numpy~=1.*", "only after == and !="},
		{"local version", Python, "torch==2.0+cpu", "local version"},
		{"v prefix", Python, "numpy==v1.0", "does not start with a number"},
		{"alpha spelling", Python, "numpy==1.0alpha1", "without a number"},
		{"pre without number", Python, "numpy==1.0rc", "without a number"},
		{"post without number", Python, "numpy==1.0.post", "without a number"},
		{"garbage version", Python, "numpy==1.0$", "not part of a version"},
		{"glob in name", Python, "num*", "version operator"},
		{"empty extras", Python, "pandas[]", "invalid extra"},
		{"unclosed extras", Python, "pandas[excel", "',' or ']'"},
		{"extra option", Python, "pandas[--x]", "invalid extra"},
		{"unknown language", Language("julia"), "numpy", "unknown language"},
		{"r version", R, "ggplot2>=3", "after the name"},
		{"r extras", R, "ggplot2[x]", "after the name"},
		{"r digit start", R, "2ggplot", "not an R package name"},
		{"r underscore", R, "gg_plot", "not an R package name"},
		{"r hyphen", R, "gg-plot", "not an R package name"},
		{"r one letter", R, "a", "not an R package name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSpec(tc.lang, tc.in)
			if err == nil {
				t.Fatalf("ParseSpec(%q) accepted %+v", tc.in, s)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			// Every refusal names the spec and says what to write instead.
			if !strings.Contains(err.Error(), "package spec ") || !strings.Contains(err.Error(), "; ") {
				t.Fatalf("error %q does not name the spec and a remedy", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r\x00\t") {
				t.Fatalf("error %q carries raw control characters", err)
			}
		})
	}
}
