package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A backend plugin written only against the SDK, declared in forge.toml with
// its sha256, adds a language (and its execute_ tool) without any change to
// the core.
func TestThirdPartyBackend(t *testing.T) {
	testenv.Require(t)
	bin := filepath.Join(t.TempDir(), "shout-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/shoutplugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sum, err := plugins.Checksum(bin)
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.StartServer(t, "[plugins.shout]\npath = \""+bin+"\"\nsha256 = \""+sum+"\"\n")
	tools, err := s.Session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "execute_shout") {
		t.Fatalf("tools %v", names)
	}
	var o out
	res := s.Call(t, "execute_shout", map[string]any{"code": "hello forge"}, &o)
	if res.IsError || o.Stdout != "HELLO FORGE\n" || o.Result != "11" {
		t.Fatalf("%+v %s", o, testenv.Text(res))
	}

	// The same plugin with a wrong pinned digest is refused. Declared with its
	// language, its tool stays and says why; nothing takes its place.
	bad := testenv.StartServer(t, "[plugins.shout]\npath = \""+bin+"\"\nsha256 = \""+strings.Repeat("0", 64)+"\"\nlanguages = [\"shout\"]\n")
	tools, err = bad.Session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, tl := range tools.Tools {
		listed = listed || tl.Name == "execute_shout" && strings.Contains(tl.Description, "checksum mismatch")
	}
	if !listed {
		t.Fatalf("the refused plugin's tool is not listed with its reason: %v", tools.Tools)
	}
	o = out{}
	res = bad.Call(t, "execute_shout", map[string]any{"code": "hello"}, &o)
	if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, "checksum mismatch") || o.Stdout != "" {
		t.Fatalf("%+v %s", o, testenv.Text(res))
	}
	// Undeclared, its language is unknown: no tool.
	undeclared := testenv.StartServer(t, "[plugins.shout]\npath = \""+bin+"\"\nsha256 = \""+strings.Repeat("0", 64)+"\"\n")
	tools, _ = undeclared.Session.ListTools(t.Context(), nil)
	for _, tl := range tools.Tools {
		if tl.Name == "execute_shout" {
			t.Fatal("a plugin with a mismatched checksum was loaded")
		}
	}
}
