package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A second stateless Python plugin (the real one under another name) makes
// the choice ambiguous: the server refuses to start and says what to set;
// with the choice configured, calls go to the chosen plugin and say so.
func TestBackendChoiceByConfiguration(t *testing.T) {
	testenv.Require(t)
	bin := testenv.Binary(t)
	second := "[plugins.py2]\npath = \"" + filepath.Join(filepath.Dir(bin), "mcp-forge-plugin-python") + "\"\n"

	base := testenv.BaseDir(t)
	cfg := filepath.Join(base, "forge.toml")
	os.WriteFile(cfg, []byte(second), 0o600)
	cmd := exec.Command(bin, "--config", cfg, "serve")
	cmd.Env = append(os.Environ(), "FORGE_VOLUMES_BASE_PATH="+base, "FORGE_SECURITY_AUDIT_LOG="+filepath.Join(base, "audit.log"))
	log, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(log), `backends py2, python all serve Python stateless runs; choose one in the configuration, e.g. [execution.default_backend] python = "py2"`) {
		t.Fatalf("%v\n%s", err, log)
	}

	s := testenv.StartServer(t, second+"[execution.default_backend]\npython = \"py2\"\n")
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": "6 * 7"}, &o)
	if res.IsError || o.Result != "42" || o.Backend != "py2" {
		t.Fatalf("%+v %s", o, testenv.Text(res))
	}
}

// `mcp-forge images` lists the images the plugins run, learnt from them.
func TestImagesCommand(t *testing.T) {
	testenv.Require(t)
	got, err := exec.Command(testenv.Binary(t), "images").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	for _, want := range []string{"mcp-forge/python:3.11", "(used by jupyter, python)", "mcp-forge/r:4.2", "(used by irkernel, r)"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
}
