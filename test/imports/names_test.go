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
	dir := filepath.Join("..", "..", "core", "mcpserver")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		n++
		found, err := concreteEngine(fset, filepath.Join(dir, e.Name()), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s: core/mcpserver depends on the engine itself; use its interfaces (deps.go)", f)
		}
	}
	if n < 5 {
		t.Fatalf("found only %d Go files in %s", n, dir)
	}
}

// The check finds what it forbids.
func TestConcreteEngineFound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		src  string
		want int
	}{
		{"package p\nimport \"e/engine\"\ntype S struct{ eng *engine.Engine }", 1},
		{"package p\nimport \"e/engine\"\nvar _, _ = engine.New(nil)", 1},
		{"package p\nimport \"e/engine\"\ntype S struct{ r engine.Request }", 0},
	} {
		got, err := concreteEngine(token.NewFileSet(), "x.go", c.src)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.want {
			t.Errorf("%q: found %v, want %d", c.src, got, c.want)
		}
	}
}
