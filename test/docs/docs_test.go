// Package docs checks that README.md and docs/ describe the server that
// exists: every configuration key, tool, resource URI and audit rule they
// name exists, and every one that exists is named somewhere. It reads the
// code (the config types, the reviewed tools/list golden, the Go sources
// of rules and resources) and needs no Podman. architecture_test.go holds
// README.md's package list and docs/architecture.md (its diagrams, the
// packages and file:function places it names) against the tree.
package docs

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
)

const root = "../.."

// docText is README.md and every docs/*.md, by file name.
func docText(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(f, root+"/")] = string(b)
	}
	return out
}

var backticked = regexp.MustCompile("`([^`\n]+)`")

// codeSpans is every `span` of the docs, with the files naming it.
func codeSpans(docs map[string]string) map[string][]string {
	out := map[string][]string{}
	for name, text := range docs {
		for _, m := range backticked.FindAllStringSubmatch(text, -1) {
			out[m[1]] = append(out[m[1]], name)
		}
	}
	return out
}

// configKeys is every key path of config.Config; a map level is "*" (a
// tenant, plugin or server name). Leaves and tables both count, so
// `plugins.NAME.config` and `[quotas]`'s `quotas` are keys.
func configKeys() map[string]bool {
	keys := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
				if name == "" || name == "-" {
					continue
				}
				p := name
				if prefix != "" {
					p = prefix + "." + name
				}
				keys[p] = true
				walk(f.Type, p)
			}
		case reflect.Map:
			keys[prefix+".*"] = true
			walk(t.Elem(), prefix+".*")
		}
	}
	walk(reflect.TypeOf(config.Config{}), "")
	return keys
}

// A span is read as a key path when it starts with a top-level section and
// has only key characters, optionally "= value" after it.
var keySpan = regexp.MustCompile(`^\[?([a-z_]+(?:\.[A-Za-z0-9_*-]+)+)\]?(?:\s*=.*)?$`)

func TestConfigKeysNamedInDocsExist(t *testing.T) {
	keys := configKeys()
	sections := map[string]bool{}
	for k := range keys {
		if !strings.Contains(k, ".") {
			sections[k] = true
		}
	}
	// Audit events (execution.request, security.violation), file names
	// (bridge.sock) and other dotted words of the code share the shape of
	// a key: a span that is a string literal of the code is not read as one.
	literals := map[string]bool{}
	for _, s := range goStrings(t, "core", "sdk", "plugins") {
		literals[s] = true
	}
	for span, files := range codeSpans(docText(t)) {
		m := keySpan.FindStringSubmatch(span)
		// `server.tool` is how an mcp_tools name is written (a bridged
		// server and one of its tools), not the [server] table.
		if m == nil || strings.Contains(m[1], "*") || literals[m[1]] || m[1] == "server.tool" {
			continue
		}
		parts := strings.Split(m[1], ".")
		if !sections[parts[0]] || strings.ToLower(m[1]) != m[1] {
			continue // not a section, or a Go name (auth.RequireBearerToken)
		}
		if !keyExists(keys, parts) {
			t.Errorf("%s name the configuration key %q, which config.Config does not have", strings.Join(uniq(files), ", "), m[1])
		}
	}
}

// keyExists matches a path whose map levels hold any name (tenants.alice,
// plugins.NAME.config).
func keyExists(keys map[string]bool, parts []string) bool {
	var try func(prefix string, rest []string) bool
	try = func(prefix string, rest []string) bool {
		if len(rest) == 0 {
			return keys[prefix]
		}
		join := func(s string) string {
			if prefix == "" {
				return s
			}
			return prefix + "." + s
		}
		return try(join(rest[0]), rest[1:]) || (keys[join("*")] && try(join("*"), rest[1:]))
	}
	return try("", parts)
}

// The example config names every key, so every key is documented there;
// here the other direction: every top-level section is described in the
// prose too, not only in the example.
func TestEveryConfigSectionIsInTheDocs(t *testing.T) {
	all := strings.Join(values(docText(t)), "\n")
	for k := range configKeys() {
		if strings.Contains(k, ".") {
			continue
		}
		if !strings.Contains(all, "["+k) && !strings.Contains(all, "`"+k+".") {
			t.Errorf("no page of README.md or docs/ describes the configuration section [%s]", k)
		}
	}
}

func TestToolsMatchTheREADME(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "core", "mcpserver", "testdata", "tools.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tools []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, tool := range tools {
		name := tool.Name
		if strings.HasPrefix(name, "execute_") {
			name = "execute_<language>" // one row for the generated tools
		}
		exists[name] = true
	}
	readme := docText(t)["README.md"]
	listed := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `([a-z_<>]+)` \\|")
	surface := readme[strings.Index(readme, "## MCP surface"):]
	surface = surface[:strings.Index(surface, "\n## ")+1]
	for _, m := range row.FindAllStringSubmatch(surface, -1) {
		listed[m[1]] = true
		if !exists[m[1]] {
			t.Errorf("README.md's MCP surface lists the tool %q, which tools/list does not have", m[1])
		}
	}
	for name := range exists {
		if !listed[name] {
			t.Errorf("the tool %q is in tools/list but not in README.md's MCP surface table", name)
		}
	}
}

// goStrings is every string literal of the non-test Go files under dirs.
func goStrings(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, s)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

var uriPattern = regexp.MustCompile(`mcp://forge/[A-Za-z0-9_{}+./<>-]*[A-Za-z0-9_}>]`)

func TestResourceURIs(t *testing.T) {
	// The resources and templates the server registers are the literals
	// starting mcp://forge/ in core/mcpserver, ending at a leaf name or a
	// template variable (not a prefix the code builds URIs from).
	var served []string
	for _, s := range goStrings(t, "core/mcpserver") {
		if m := uriPattern.FindString(s); m != "" && m == s {
			served = append(served, s)
		}
	}
	if len(served) < 4 {
		t.Fatalf("found only %v in core/mcpserver: the test no longer finds the resources", served)
	}
	match := func(doc string) bool {
		for _, s := range served {
			if templateRegexp(s).MatchString(doc) {
				return true
			}
		}
		return false
	}
	docs := docText(t)
	all := strings.Join(values(docs), "\n")
	for _, s := range served {
		if !strings.Contains(all, s) {
			t.Errorf("the resource %s is served but no page of README.md or docs/ names it", s)
		}
	}
	for name, text := range docs {
		for _, u := range uriPattern.FindAllString(text, -1) {
			if !match(u) {
				t.Errorf("%s names the resource %s, which the server does not serve", name, u)
			}
		}
	}
}

// templateRegexp matches a URI template's instances, and the template
// itself as the docs write it ({id}, {+path} or <id>).
func templateRegexp(tmpl string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for tmpl != "" {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(regexp.QuoteMeta(tmpl))
			break
		}
		b.WriteString(regexp.QuoteMeta(tmpl[:i]))
		j := strings.IndexByte(tmpl[i:], '}')
		if strings.HasPrefix(tmpl[i+1:], "+") {
			b.WriteString(`.+`)
		} else {
			b.WriteString(`[^/]+`)
		}
		tmpl = tmpl[i+j+1:]
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// auditRules is every rule the code can audit a refusal or violation
// with: the Rule* string constants and the policy's violation("rule", …).
func auditRules(t *testing.T) map[string]string {
	t.Helper()
	rules := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "core"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		where := strings.TrimPrefix(path, root+"/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if !strings.HasPrefix(id.Name, "Rule") || i >= len(n.Values) {
						continue
					}
					if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						rules[s] = where + " " + id.Name
					}
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "violation" && len(n.Args) > 0 {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						rules[s] = where + " violation"
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func TestAuditRulesDocumented(t *testing.T) {
	rules := auditRules(t)
	if len(rules) < 50 {
		t.Fatalf("found only %d rules in core: the test no longer finds them", len(rules))
	}
	spans := codeSpans(docText(t))
	var missing []string
	for rule, where := range rules {
		if _, ok := spans[rule]; !ok {
			missing = append(missing, rule+" ("+where+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("the audit rule %s is not documented: name it in docs/audit.md or the page of its feature", m)
	}
	// The other direction: every row of a rule table in the docs names a
	// rule the code has.
	docs := docText(t)
	for name, text := range docs {
		for _, table := range ruleTables(text) {
			for _, rule := range table {
				if _, ok := rules[rule]; !ok {
					t.Errorf("%s documents the audit rule %q, which no code audits", name, rule)
				}
			}
		}
	}
}

// ruleTables returns the first-column entries of every table whose header
// starts with "| rule |".
func ruleTables(text string) [][]string {
	var out [][]string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "| rule |") {
			continue
		}
		var rows []string
		for j := i + 2; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			cell := strings.TrimSpace(strings.SplitN(lines[j][1:], "|", 2)[0])
			for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
				rows = append(rows, m[1])
			}
			i = j
		}
		out = append(out, rows)
	}
	return out
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func uniq(s []string) []string {
	sort.Strings(s)
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
