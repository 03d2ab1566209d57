package imports

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// concreteEngine lists where src (a Go file) names the engine itself,
// engine.Engine or engine.New, rather than an interface of its own.
func concreteEngine(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "engine" && (sel.Sel.Name == "Engine" || sel.Sel.Name == "New") {
				out = append(out, fset.Position(sel.Pos()).String()+": engine."+sel.Sel.Name)
			}
		}
		return true
	})
	return out, nil
}

// core/mcpserver uses the core through the interfaces it defines where it
// uses them (Executor, Sessions, Files, Checkpoints, Inventory), never the
// engine itself: its non-test code names no engine.Engine.
func TestMCPServerUsesInterfaces(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files := sources(t, "core/mcpserver")
	for _, name := range files {
		found, err := concreteEngine(fset, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s: core/mcpserver depends on the engine itself; use its interfaces (deps.go)", f)
		}
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Go files in core/mcpserver", len(files))
	}
}

// sources are the non-test Go files of the package in dir (relative to
// the repository).
func sources(t *testing.T, dir string) []string {
	t.Helper()
	dir = filepath.Join("..", "..", filepath.FromSlash(dir))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// The check finds what it forbids.
func TestConcreteEngineFound(t *testing.T) {
	t.Parallel()
	finds(t, concreteEngine, map[string]int{
		"package p\nimport \"e/engine\"\ntype S struct{ eng *engine.Engine }": 1,
		"package p\nimport \"e/engine\"\nvar _, _ = engine.New(nil)":          1,
		"package p\nimport \"e/engine\"\ntype S struct{ r engine.Request }":   0,
	})
}

// finds checks that check finds in each source as many places as it says.
func finds(t *testing.T, check func(*token.FileSet, string, any) ([]string, error), cases map[string]int) {
	t.Helper()
	for src, want := range cases {
		got, err := check(token.NewFileSet(), "x.go", src)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("%q: found %v, want %d", src, got, want)
		}
	}
}

// runtimeNamed lists where src (a Go file) names a runtime implementation
// rather than asking for runtime.Capabilities: an import of one (or of
// core/cluster), or a comparison with a runtime kind ("kubernetes",
// "podman").
func runtimeNamed(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, imp := range f.Imports {
		switch p := strings.Trim(imp.Path.Value, `"`); p {
		case module + "/core/runtime/kubernetes", module + "/core/runtime/podman", module + "/core/cluster":
			out = append(out, fset.Position(imp.Pos()).String()+": imports "+p)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		b, ok := n.(*ast.BinaryExpr)
		if !ok || (b.Op != token.EQL && b.Op != token.NEQ) {
			return true
		}
		for _, side := range []ast.Expr{b.X, b.Y} {
			if lit, ok := side.(*ast.BasicLit); ok && (lit.Value == `"kubernetes"` || lit.Value == `"podman"`) {
				out = append(out, fset.Position(b.Pos()).String()+": compares with "+lit.Value)
			}
		}
		return true
	})
	return out, nil
}

// core/forge picks the runtime in one factory, runtimes.go; everywhere
// else it asks what the runtime declares (runtime.Capabilities), never
// which runtime it is.
func TestForgeNamesRuntimesOnce(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	factory := 0
	for _, name := range sources(t, "core/forge") {
		found, err := runtimeNamed(fset, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(name) == "runtimes.go" {
			factory = len(found)
			continue
		}
		for _, f := range found {
			t.Errorf("%s: core/forge names a runtime outside its factory (runtimes.go); declare it in runtime.Capabilities", f)
		}
	}
	if factory == 0 {
		t.Fatal("core/forge/runtimes.go names no runtime: is the factory elsewhere?")
	}
}

// The check finds what it forbids.
func TestRuntimeNamedFound(t *testing.T) {
	t.Parallel()
	finds(t, runtimeNamed, map[string]int{
		"package p\nimport \"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes\"\nvar _ = kubernetes.New":                   1,
		"package p\nimport \"github.com/mcp-forge/mcp-forge/core/cluster\"\nvar _ = cluster.New":                                 1,
		"package p\nfunc f(kind string) bool { return kind == \"kubernetes\" || \"podman\" != kind }":                            2,
		"package p\nimport \"github.com/mcp-forge/mcp-forge/core/runtime\"\nvar _ = runtime.CapabilitiesOf(nil).Sessions != nil": 0,
		"package p\nvar name = \"podman\"": 0,
	})
}
