package packages

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

func builderConfig(mod func(*config.EnvironmentBuilder)) config.EnvironmentBuilder {
	c := config.Default().EnvironmentBuilder
	if mod != nil {
		mod(&c)
	}
	return c
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustPolicy(t *testing.T, c config.EnvironmentBuilder) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func TestBuiltinListsLoad(t *testing.T) {
	for _, name := range []string{"allowlist", "blocklist"} {
		l, err := LoadList(name, "")
		if err != nil {
			t.Fatalf("built-in %s: %v", name, err)
		}
		if len(l.Patterns) < 20 {
			t.Fatalf("built-in %s has only %d patterns", name, len(l.Patterns))
		}
	}
	// No package is on both built-in lists.
	allow, _ := LoadList("allowlist", "")
	block, _ := LoadList("blocklist", "")
	for _, a := range allow.Patterns {
		if b, ok := block.Match(a.Lang, a.Glob); ok {
			t.Errorf("allowlisted %s is blocked by %s", a, b)
		}
	}
}

func TestParsePattern(t *testing.T) {
	cases := []struct {
		text, glob string
		lang       Language
		err        string
	}{
		{"numpy", "numpy", "", ""},
		{"*crypto*", "*crypto*", "", ""},
		{"*_Dev", "*-dev", "", ""},
		{"python:scikit_learn", "scikit-learn", Python, ""},
		{"r:data.table", "data-table", R, ""},
		{"r:*", "*", R, ""},
		{"julia:x", "", "", "unknown language prefix"},
		{"python:", "", "", "no name pattern"},
		{"num[py]", "", "", "has '['"},
		{"a b", "", "", "has ' '"},
		{"---", "", "", "matches no package name"},
	}
	for _, tc := range cases {
		p, err := ParsePattern(tc.text, "test")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePattern(%q) error %v, want %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || p.Glob != tc.glob || p.Lang != tc.lang {
			t.Errorf("ParsePattern(%q) = %+v, %v; want glob %q lang %q", tc.text, p, err, tc.glob, tc.lang)
		}
	}
}

func TestListFile(t *testing.T) {
	f := writeFile(t, "allow.txt", "# scientific\nnumpy  # arrays\n\n  *crypto*\npython:Scikit_Learn\nr:ggplot2\n")
	l, err := LoadList("allowlist", f)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lang Language
		key  string
		want bool
		line string
	}{
		{Python, "numpy", true, "line 2"},
		{R, "numpy", true, "line 2"}, // no prefix: both languages
		{Python, "pycryptodome", true, "line 4"},
		{Python, "crypto", true, "line 4"},
		{Python, "scikit-learn", true, "line 5"},
		{R, "scikit-learn", false, ""},
		{R, "ggplot2", true, "line 6"},
		{Python, "ggplot2", false, ""},
		{Python, "pandas", false, ""},
	} {
		p, ok := l.Match(tc.lang, tc.key)
		if ok != tc.want || ok && !strings.HasSuffix(p.Source, tc.line) {
			t.Errorf("%s %s: match %v %+v, want %v at %s", tc.lang, tc.key, ok, p, tc.want, tc.line)
		}
	}

	// A bad line fails the whole file, naming file and line.
	bad := writeFile(t, "bad.txt", "numpy\nnum py\n")
	if _, err := LoadList("allowlist", bad); err == nil || !strings.Contains(err.Error(), bad+" line 2") {
		t.Fatalf("bad line: %v", err)
	}
	if _, err := LoadList("allowlist", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing list file must be an error")
	}
}

func TestNewErrors(t *testing.T) {
	bad := writeFile(t, "bad.txt", "ok\n$bad\n")
	cases := []struct {
		name string
		mod  func(*config.EnvironmentBuilder)
		want string
	}{
		{"missing blocklist", func(c *config.EnvironmentBuilder) {
			c.PackageValidation.BlocklistPath = "/nonexistent/blocklist"
		}, FieldBlocklistPath + ": reading the blocklist"},
		{"bad allowlist", func(c *config.EnvironmentBuilder) { c.PackageValidation.AllowlistPath = bad }, FieldAllowlistPath + ": " + bad + " line 2"},
		{"bad approval pattern", func(c *config.EnvironmentBuilder) {
			c.PackageValidation.RequireApprovalPatterns = []string{"*-dev", "[a-z]*"}
		}, FieldApproval + "[1]"},
		{"bad approved", func(c *config.EnvironmentBuilder) {
			c.PackageValidation.ApprovedPackages = []string{"numpy", "numpy>=1"}
		}, FieldApproved + "[1]"},
		{"approved wildcard", func(c *config.EnvironmentBuilder) {
			c.PackageValidation.ApprovedPackages = []string{"*"}
		}, FieldApproved + "[0]"},
		{"zero max", func(c *config.EnvironmentBuilder) { c.MaxPackagesPerBuild = 0 }, FieldMaxPackages},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(builderConfig(tc.mod))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckDecisions(t *testing.T) {
	allow := writeFile(t, "allow.txt", "numpy\npandas\nforge-*\nnightly-tool-nightly\nr:ggplot2\n")
	block := writeFile(t, "block.txt", "*crypto*\nevil\nr:devtools\n")
	p := mustPolicy(t, builderConfig(func(c *config.EnvironmentBuilder) {
		c.PackageValidation.AllowlistPath = allow
		c.PackageValidation.BlocklistPath = block
		c.PackageValidation.ApprovedPackages = []string{"python:approved-dev", "scipy", "r:crypto"}
	}))
	cases := []struct {
		lang    Language
		spec    string
		verdict Verdict
		rule    string
		inErr   []string // substrings of Err() for refusals
	}{
		{Python, "numpy>=1.24", Allowed, RuleAllowlist, nil},
		{Python, "NumPy", Allowed, RuleAllowlist, nil},
		{Python, "Forge_Thing", Allowed, RuleAllowlist, nil},
		{Python, "pycryptodome", Blocked, RuleBlocklist, []string{`"pycryptodome"`, `"*crypto*"`, block + " line 1", FieldBlocklistPath, "cannot be approved"}},
		{Python, "Py.Crypto", Blocked, RuleBlocklist, []string{`"py-crypto"`, `"*crypto*"`}},
		{Python, "evil", Blocked, RuleBlocklist, []string{`"evil"`}},
		{Python, "requests", Blocked, RuleAllowlist, []string{`"requests"`, "not on the allowlist", allow, `"python:requests"`, FieldApproved, FieldAllowlistPath}},
		{Python, "forge-tool-dev", NeedsApproval, RuleApproval, []string{`"forge-tool-dev"`, `"*-dev"`, FieldApproval + "[0]", `"python:forge-tool-dev"`, FieldApproved}},
		{Python, "nightly-tool-nightly", NeedsApproval, RuleApproval, []string{`"*-nightly"`, FieldApproval + "[1]"}},
		{Python, "approved-dev", Allowed, RuleApproved, nil},
		{Python, "approved_dev==1.0", Allowed, RuleApproved, nil},
		{R, "approved.dev", NeedsApproval, RuleApproval, []string{`"r:approved.dev"`}}, // approved for Python only
		{Python, "scipy", Allowed, RuleApproved, nil},                                  // approved, not allowlisted
		{R, "ggplot2", Allowed, RuleAllowlist, nil},
		{R, "numpy", Allowed, RuleAllowlist, nil}, // unprefixed allowlist line
		{R, "devtools", Blocked, RuleBlocklist, nil},
		{Python, "devtools", Blocked, RuleAllowlist, nil}, // r: blocklist line only
		{R, "crypto", Blocked, RuleBlocklist, nil},        // approval never beats the blocklist
		{R, "tidyr", Blocked, RuleAllowlist, []string{`"r:tidyr"`}},
	}
	for _, tc := range cases {
		t.Run(string(tc.lang)+"/"+tc.spec, func(t *testing.T) {
			res, err := p.Check([]string{tc.spec}, tc.lang)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			d := res.Decisions[0]
			if d.Verdict != tc.verdict || d.Rule != tc.rule {
				t.Fatalf("got %s by %s (%s); want %s by %s", d.Verdict, d.Rule, d.Detail, tc.verdict, tc.rule)
			}
			if res.Allowed() != (tc.verdict == Allowed) || (res.Err() == nil) != (tc.verdict == Allowed) {
				t.Fatalf("Allowed()=%v Err()=%v for verdict %s", res.Allowed(), res.Err(), d.Verdict)
			}
			for _, s := range tc.inErr {
				if !strings.Contains(res.Err().Error(), s) {
					t.Errorf("error %q does not contain %q", res.Err(), s)
				}
			}
			if d.Verdict != Allowed {
				rs := Refusals(res.Err())
				if len(rs) != 1 || rs[0].Rule != tc.rule || rs[0].Details["package"] != tc.spec {
					t.Errorf("Refusals = %+v", rs)
				}
				if d.Pattern != nil && rs[0].Details["pattern"] == nil {
					t.Errorf("refusal does not name the pattern %s", d.Pattern)
				}
			}
		})
	}
}

func TestCheckBuiltinDefaults(t *testing.T) {
	p := mustPolicy(t, builderConfig(nil))
	res, err := p.Check([]string{"numpy>=1.24", "pandas", "scikit-learn~=1.3", "matplotlib"}, Python)
	if err != nil || !res.Allowed() {
		t.Fatalf("common packages refused: %v %v", err, res.Err())
	}
	got := []string{}
	for _, s := range res.Specs() {
		got = append(got, s.String())
	}
	if strings.Join(got, " ") != "numpy>=1.24 pandas scikit-learn~=1.3 matplotlib" {
		t.Fatalf("specs %v", got)
	}
	for _, name := range []string{"colourama", "jeIlyfish", "torchtriton", "pip", "python3_dateutil"} {
		res, err := p.Check([]string{name}, Python)
		if err != nil || res.Decisions[0].Verdict != Blocked || res.Decisions[0].Rule != RuleBlocklist {
			t.Errorf("%s: %v %+v", name, err, res.Decisions)
		}
	}
	res, err = p.Check([]string{"ggplot2", "data.table", "Matrix"}, R)
	if err != nil || !res.Allowed() {
		t.Fatalf("common R packages refused: %v %v", err, res.Err())
	}
	res, _ = p.Check([]string{"devtools"}, R)
	if res.Decisions[0].Rule != RuleBlocklist {
		t.Fatalf("devtools: %+v", res.Decisions[0])
	}

	// With the allowlist off, only the blocklist and approvals apply.
	p = mustPolicy(t, builderConfig(func(c *config.EnvironmentBuilder) { c.PackageValidation.UseAllowlist = false }))
	res, _ = p.Check([]string{"some-unknown-package", "colourama", "x-dev"}, Python)
	want := []Verdict{Allowed, Blocked, NeedsApproval}
	for i, d := range res.Decisions {
		if d.Verdict != want[i] {
			t.Errorf("%s: %s (%s), want %s", d.Input, d.Verdict, d.Detail, want[i])
		}
	}
	if res.Decisions[0].Rule != RuleNoAllowlist {
		t.Errorf("rule %s", res.Decisions[0].Rule)
	}
}

func TestCheckRequestRefusals(t *testing.T) {
	p := mustPolicy(t, builderConfig(func(c *config.EnvironmentBuilder) { c.MaxPackagesPerBuild = 3 }))
	cases := []struct {
		name  string
		lang  Language
		specs []string
		rules []string
		want  []string
	}{
		{"too many", Python, []string{"numpy", "pandas", "scipy", "sympy"}, []string{RuleMaxPackages},
			[]string{"4 packages requested", FieldMaxPackages + " (3)"}},
		{"none", Python, nil, []string{RuleSpec}, []string{"no packages"}},
		{"bad language", "julia", []string{"x"}, []string{RuleSpec}, []string{`unknown language "julia"`}},
		{"bad specs all reported", Python, []string{"--index-url=http://x", "numpy", "pkg @ http://x"}, []string{RuleSpec, RuleSpec},
			[]string{`"--index-url=http://x"`, `"pkg @ http://x"`, "starts with '-'", "direct reference"}},
		{"duplicate after normalising", Python, []string{"scikit-learn", "Scikit_Learn<2"}, []string{RuleDuplicate},
			[]string{`"scikit-learn"`, "requested twice", `"Scikit_Learn<2"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := p.Check(tc.specs, tc.lang)
			if err == nil || len(res.Decisions) != 0 {
				t.Fatalf("want a refusal, got %+v, %v", res, err)
			}
			rs := Refusals(err)
			if len(rs) != len(tc.rules) {
				t.Fatalf("refusals %+v, want rules %v", rs, tc.rules)
			}
			for i, r := range rs {
				if r.Rule != tc.rules[i] {
					t.Errorf("refusal %d rule %s, want %s", i, r.Rule, tc.rules[i])
				}
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			var ref *refusal.Error
			if !errors.As(err, &ref) {
				t.Error("errors.As finds no *refusal.Error")
			}
		})
	}
}

func TestCheckLocked(t *testing.T) {
	p := mustPolicy(t, builderConfig(nil))
	if err := p.CheckLocked([]string{"numpy", "python-dateutil", "six", "some-dependency"}, Python); err != nil {
		t.Fatalf("clean lock refused: %v", err)
	}
	err := p.CheckLocked([]string{"numpy", "Colourama", "torchtriton"}, Python)
	rs := Refusals(err)
	if len(rs) != 2 || rs[0].Details["package"] != "Colourama" || rs[1].Details["package"] != "torchtriton" || rs[0].Rule != RuleBlocklist {
		t.Fatalf("refusals %+v (%v)", rs, err)
	}
	if !strings.Contains(err.Error(), "built-in blocklist line") {
		t.Fatalf("error %q does not name the list line", err)
	}
}
