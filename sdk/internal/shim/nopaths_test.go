package shim

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Plugin API v2 names no location on the core's machine: a plugin may run
// anywhere, the sandboxes elsewhere. Every field whose name says it holds a
// location (a path, a directory, a mount target, a socket, files keyed by
// path) must say in its comment which frame it is in (the container, the
// sandbox, or relative to something the plugin owns) and must not mention
// the host. A new field "cache_dir" with no comment, or "// a host
// directory", fails here.

// locationName matches names that hold a location ("work_dir", "subdir",
// "Path", "find_links", "input_files", ...), once lower-cased and stripped
// of underscores.
var locationName = regexp.MustCompile(`(path|paths|dir|dirs|target|links|workspace|socket|root|files)$`)

// framed says a comment places its location off the host.
var framed = regexp.MustCompile(`(?i)container|sandbox|relative`)

func checkLocationComment(t *testing.T, where, name, comment string) {
	t.Helper()
	if !locationName.MatchString(strings.ToLower(strings.ReplaceAll(name, "_", ""))) {
		return
	}
	switch {
	case strings.Contains(strings.ToLower(comment), "host"):
		t.Errorf("%s: %s holds a location its comment puts on the host: %q", where, name, comment)
	case !framed.MatchString(comment):
		t.Errorf("%s: %s holds a location and its comment does not say where (in the container or sandbox, or relative to what): %q", where, name, comment)
	}
}

// protoComments are the comments of each "name = number;" declaration of a
// .proto file: the line's trailing comment and the // lines right above.
func protoComments(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`\b([a-z_0-9]+)\s*=\s*([0-9]+)\s*;`)
	out := map[string]string{}
	var above []string
	for _, line := range strings.Split(string(data), "\n") {
		code, trailing, _ := strings.Cut(line, "//")
		if strings.TrimSpace(code) == "" && strings.HasPrefix(strings.TrimSpace(line), "//") {
			above = append(above, trailing)
			continue
		}
		if m := decl.FindStringSubmatch(code); m != nil {
			out[m[1]+"="+m[2]] += strings.Join(append(above, trailing), " ")
		}
		above = nil
	}
	return out
}

// stringValued: a string, strings, or a map keyed by strings.
func stringValued(f protoreflect.FieldDescriptor) bool {
	if f.IsMap() {
		return f.MapKey().Kind() == protoreflect.StringKind
	}
	return f.Kind() == protoreflect.StringKind
}

func TestV2NamesNoHostLocation(t *testing.T) {
	files, err := filepath.Glob("../../proto/forge/plugin/v2/*.proto")
	if err != nil || len(files) < 5 {
		t.Fatalf("v2 protos: %v %v", files, err)
	}
	comments := map[string]string{}
	for _, f := range files {
		for k, v := range protoComments(t, f) {
			comments[k] += v
		}
	}
	fields := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("forge.plugin.v2", func(fd protoreflect.FileDescriptor) bool {
		var walk func(protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := 0; i < ms.Len(); i++ {
				m := ms.Get(i)
				for j := 0; j < m.Fields().Len(); j++ {
					f := m.Fields().Get(j)
					fields++
					if !stringValued(f) {
						continue // a number, a flag or a message holds no location itself
					}
					checkLocationComment(t, string(m.FullName()), string(f.Name()), comments[string(f.Name())+"="+strconv.Itoa(int(f.Number()))])
				}
				walk(m.Messages())
			}
		}
		walk(fd.Messages())
		return true
	})
	if fields < 100 {
		t.Fatalf("checked only %d fields of forge.plugin.v2", fields)
	}
}

// The author API's requests and intents (sdk/host, sdk/builder) follow the
// same rule as the messages they travel in.
func TestAuthorAPINamesNoHostLocation(t *testing.T) {
	checked := 0
	for _, dir := range []string{"../../host", "../../builder"} {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ts, ok := n.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					return true
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					return true
				}
				for _, fl := range st.Fields.List {
					if !stringTyped(fl.Type) {
						continue
					}
					for _, name := range fl.Names {
						if name.IsExported() {
							checked++
							checkLocationComment(t, filepath.Base(dir)+"."+ts.Name.Name, name.Name, fl.Doc.Text()+" "+fl.Comment.Text())
						}
					}
				}
				return true
			})
		}
	}
	if checked < 40 {
		t.Fatalf("checked only %d fields of sdk/host and sdk/builder", checked)
	}
}

// stringTyped: string, []string, or a map keyed by strings.
func stringTyped(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "string"
	case *ast.ArrayType:
		return stringTyped(e.Elt)
	case *ast.MapType:
		return stringTyped(e.Key)
	}
	return false
}
