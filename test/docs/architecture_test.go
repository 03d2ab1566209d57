package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goPackageDirs is every directory under dirs (relative to base) holding a
// Go file that is not a test: the packages a reader of the README's list
// meets in the tree, internal ones and test helpers included.
func goPackageDirs(base string, dirs ...string) ([]string, error) {
	seen := map[string]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(base, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				rel, err := filepath.Rel(base, filepath.Dir(p))
				if err != nil {
					return err
				}
				seen[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out, nil
}

// packageBlock is the fenced block of README.md's "## Architecture"
// section that lists the tree: the first one whose first line names cmd/.
func packageBlock(readme string) (string, error) {
	i := strings.Index(readme, "\n## Architecture\n")
	if i < 0 {
		return "", fmt.Errorf(`README.md has no "## Architecture" section`)
	}
	section := readme[i+1:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+4]
	}
	for rest := section; ; {
		k := strings.Index(rest, "\n```\n")
		if k < 0 {
			return "", fmt.Errorf(`README.md's "## Architecture" section has no fenced block starting with cmd/ (the package list)`)
		}
		body := rest[k+5:]
		end := strings.Index(body, "\n```")
		if end < 0 {
			return "", fmt.Errorf("README.md's Architecture section has an unclosed fenced block")
		}
		if strings.HasPrefix(body, "cmd/") {
			return body[:end+1], nil
		}
		rest = body[end+4:]
	}
}

// checkPackageList returns what is wrong with a package list against the
// tree at base: a line without a description, a name that is no directory
// (or is listed twice), and a Go package of core/ or sdk/ it leaves out.
func checkPackageList(base, block string) []string {
	var errs []string
	listed := map[string]bool{}
	for n, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name := strings.TrimSuffix(fields[0], "/")
		where := fmt.Sprintf("README.md's package list, line %d (%s)", n+1, fields[0])
		if len(fields) < 2 {
			errs = append(errs, where+": no description: say what the package is, from its doc comment")
		}
		if listed[name] {
			errs = append(errs, where+": listed twice")
		}
		listed[name] = true
		if st, err := os.Stat(filepath.Join(base, name)); err != nil || !st.IsDir() {
			errs = append(errs, where+": no such directory in the tree: remove the line, or correct the path")
		}
	}
	pkgs, err := goPackageDirs(base, "core", "sdk")
	if err != nil {
		return append(errs, err.Error())
	}
	for _, p := range pkgs {
		if !listed[p] {
			errs = append(errs, fmt.Sprintf("the package %s is not in README.md's package list (## Architecture): add a line with what its doc comment says it is", p))
		}
	}
	return errs
}

func TestREADMEPackageListMatchesTheTree(t *testing.T) {
	block, err := packageBlock(docText(t)["README.md"])
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := goPackageDirs(root, "core", "sdk")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 40 {
		t.Fatalf("found only %d packages under core/ and sdk/: the test no longer finds them", len(pkgs))
	}
	for _, e := range checkPackageList(root, block) {
		t.Error(e)
	}
}

// The check itself, against lists that are wrong in each way it looks for:
// it must say so, or the test above could pass on any README.
func TestPackageListCheckFails(t *testing.T) {
	block, err := packageBlock(docText(t)["README.md"])
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, block, want string
	}{
		{"a package left out", strings.Replace(block, "core/forward", "cmd/mcp-forge", 1), "the package core/forward is not in"},
		{"a directory that does not exist", block + "core/nosuch               a package that is not there\n", "core/nosuch): no such directory"},
		{"a line without a description", block + "core/engine\n", "no description"},
		{"a package listed twice", block + "sdk/kernel  again\n", "listed twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkPackageList(root, tc.block)
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("checkPackageList gave %q, want an error containing %q", errs, tc.want)
			}
		})
	}
	if _, err := packageBlock("# x\n\n## Architecture\n\ntext\n\n## Next\n\n```\ncmd/\n```\n"); err == nil {
		t.Error("packageBlock found a list outside the Architecture section")
	}
}

var (
	mermaidBlock = regexp.MustCompile("(?s)```mermaid\n(.*?)```")
	// treePath is a path of the repository a page names (core/engine,
	// sdk/kernel/kernel.go), not part of a longer path or a URL.
	treePath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:cmd|core|sdk|plugins|images|dist|test)/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)
	// funcRef is file:function as the walkthrough writes it
	// (core/engine/engine.go:Engine.Execute).
	funcRef = regexp.MustCompile(`((?:cmd|core|sdk|plugins)/[A-Za-z0-9_./-]+\.go):([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)`)
)

// checkArchitecture returns what is wrong with the architecture page's
// text against the tree at base: a diagram that is empty, a path that does
// not exist, a file:function whose file does not define that function.
func checkArchitecture(base, text string, minDiagrams int) []string {
	var errs []string
	blocks := mermaidBlock.FindAllStringSubmatch(text, -1)
	if len(blocks) < minDiagrams {
		errs = append(errs, fmt.Sprintf("docs/architecture.md has %d mermaid diagrams, want at least %d (trust zones, layers and a call's path, the data plane on Podman and on Kubernetes)", len(blocks), minDiagrams))
	}
	for i, b := range blocks {
		lines := 0
		for _, l := range strings.Split(b[1], "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "%%") {
				lines++
			}
		}
		// A diagram type line and at least one node or edge.
		if lines < 2 {
			errs = append(errs, fmt.Sprintf("docs/architecture.md: mermaid diagram %d is empty", i+1))
		}
	}
	seen := map[string]bool{}
	for _, m := range treePath.FindAllStringSubmatch(text, -1) {
		p := strings.TrimRight(m[1], ".")
		if seen[p] {
			continue
		}
		seen[p] = true
		if _, err := os.Stat(filepath.Join(base, p)); err != nil {
			errs = append(errs, fmt.Sprintf("docs/architecture.md names %s, which is not in the tree", p))
		}
	}
	files := map[string]map[string]bool{}
	for _, m := range funcRef.FindAllStringSubmatch(text, -1) {
		file, fn := m[1], m[2]
		defs, ok := files[file]
		if !ok {
			defs = funcsOf(filepath.Join(base, file))
			files[file] = defs
		}
		if defs != nil && !defs[fn] {
			errs = append(errs, fmt.Sprintf("docs/architecture.md names %s:%s, but %s defines no %s", file, fn, file, fn))
		}
	}
	return errs
}

// funcsOf is the functions (Name) and methods (Type.Name) a Go file
// defines; nil if it cannot be read (the path check reports that).
func funcsOf(path string) map[string]bool {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fd.Recv == nil || len(fd.Recv.List) == 0 {
			out[fd.Name.Name] = true
			continue
		}
		typ := fd.Recv.List[0].Type
		if s, ok := typ.(*ast.StarExpr); ok {
			typ = s.X
		}
		if ix, ok := typ.(*ast.IndexExpr); ok { // a generic receiver
			typ = ix.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			out[id.Name+"."+fd.Name.Name] = true
		}
	}
	return out
}

const minDiagrams = 4

func TestArchitecturePageMatchesTheTree(t *testing.T) {
	docs := docText(t)
	text, ok := docs["docs/architecture.md"]
	if !ok {
		t.Fatal("docs/architecture.md is missing")
	}
	if n := len(funcRef.FindAllString(text, -1)); n < 20 {
		t.Errorf("docs/architecture.md names only %d file:function places: the walkthrough of a tool call names each step's", n)
	}
	for _, e := range checkArchitecture(root, text, minDiagrams) {
		t.Error(e)
	}
	if !strings.Contains(docs["README.md"], "(docs/architecture.md)") {
		t.Error("README.md does not link docs/architecture.md")
	}
}

func TestArchitectureCheckFails(t *testing.T) {
	ok := "```mermaid\nflowchart LR\n  a --> b\n```\n"
	tests := []struct {
		name, text, want string
	}{
		{"an empty diagram", "```mermaid\nflowchart LR\n```\n", "diagram 1 is empty"},
		{"too few diagrams", ok, "has 1 mermaid diagrams"},
		{"a package that does not exist", ok + "the call reaches core/nosuch then\n", "names core/nosuch, which is not in the tree"},
		{"a package in a diagram that does not exist", "```mermaid\nflowchart LR\n  a[core/gone] --> b\n```\n", "names core/gone"},
		{"a function the file does not define", ok + "core/engine/engine.go:Engine.Nothing\n", "defines no Engine.Nothing"},
		{"a file that does not exist", ok + "core/engine/nofile.go:Execute\n", "names core/engine/nofile.go"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkArchitecture(root, tc.text, 2)
			if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("checkArchitecture gave %q, want an error containing %q", errs, tc.want)
			}
		})
	}
	if errs := checkArchitecture(root, ok+ok+"core/engine/engine.go:Engine.Execute core/mcpserver/toolsets/add.go:add\n", 2); len(errs) > 0 {
		t.Errorf("checkArchitecture refused a correct page: %q", errs)
	}
}
