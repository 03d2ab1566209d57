package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// The debug workflow of docs/plugins.md, end to end: the python plugin is
// started by hand with -debug (as under a debugger), `mcp-forge serve`
// gets the line it prints in FORGE_REATTACH_PLUGINS, and execute_python
// through MCP runs in that process; the server's log says the plugin was
// reattached, and the server leaves the process running when it stops.
func TestDebugPluginReattachedByServe(t *testing.T) {
	testenv.Require(t)
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "bin", plugin.BinaryPrefix+"python"), plugin.DebugFlag)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the plugin by hand (make build first): %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var line string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), plugin.ReattachEnv+"="); ok {
			line = strings.Trim(v, "'")
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if line == "" {
		t.Fatal("the plugin printed no reattach line")
	}
	t.Setenv(plugin.ReattachEnv, line)
	s := testenv.StartServer(t, "")
	var o out
	if res := testenv.Call(t, s.Session, "execute_python", map[string]any{"code": "import os\nprint(os.getppid())"}, &o); res.IsError || !o.Success {
		t.Fatalf("execute_python through the reattached plugin: %s %+v", testenv.Text(res), o)
	}
	s.Session.Close() // the server stops
	log, _ := os.ReadFile(strings.TrimSuffix(s.Config, ".toml") + ".log")
	if !strings.Contains(string(log), "reattached in debug mode") {
		t.Errorf("the server's log does not say the plugin was reattached:\n%s", log)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the server ended the plugin it did not start: %v", err)
	}
}
