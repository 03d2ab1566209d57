package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Plugins built against today's API v1 SDK (the tree of testenv.V1Commit) still
// load into this core, negotiate API 1 and pass the conformance suite
// against the real core's host services and Podman: the stateless python
// plugin and the session plugin jupyter, whose kernels are reached on the
// host path v1 hands over (CreateResponse.workspace, added by the v1 path
// alone).
func TestV1PluginsConformance(t *testing.T) {
	testenv.Parallel(t)
	testenv.Require(t)
	bins := testenv.BuildV1(t, "plugins/python", "plugins/jupyter")
	for _, c := range []struct {
		name    string
		session bool
	}{{"python", false}, {"jupyter", true}} {
		t.Run(c.name, func(t *testing.T) {
			core := testenv.NewCore(t, nil)
			h, root, cfg := core.PluginHost(t, c.name)
			tr := sdktest.Track(h)
			b := sdktest.Launch(t, bins["plugins/"+c.name], tr, withoutPool(t, cfg))
			opts := []sdktest.Option{sdktest.WithTracker(tr), sdktest.WithWorkspaceRoot(root)}
			if c.session {
				sdktest.RunSessionBackend(t, b, pythonSnippets, opts...)
			} else {
				sdktest.RunBackend(t, b, pythonSnippets, opts...)
			}
		})
	}
}

// The same v1 binaries as the server's python and jupyter plugins: one
// stateless execute and one session through MCP, and the environment
// resource reports API 1 for both.
func TestV1PluginsThroughMCP(t *testing.T) {
	testenv.Require(t)
	bins := testenv.BuildV1(t, "plugins/python", "plugins/jupyter")
	s := testenv.StartServer(t, "[plugins.python]\npath = \""+bins["plugins/python"]+"\"\n[plugins.jupyter]\npath = \""+bins["plugins/jupyter"]+"\"\n[plugins.jupyter.config]\nwarm = 0\n")
	var out struct {
		Success bool   `json:"success"`
		Stdout  string `json:"stdout"`
	}
	if res := s.Call(t, "execute_python", map[string]any{"code": "print(6*7)"}, &out); res.IsError || !out.Success || out.Stdout != "42\n" {
		t.Fatalf("stateless execute through the v1 python plugin: %s (%+v)", testenv.Text(res), out)
	}
	for i, code := range []string{"x = 41", "print(x + 1)"} {
		out.Stdout = ""
		if res := s.Call(t, "execute_python", map[string]any{"code": code, "session_id": "v1session"}, &out); res.IsError || !out.Success {
			t.Fatalf("session execute %d through the v1 jupyter plugin: %s", i, testenv.Text(res))
		}
	}
	if out.Stdout != "42\n" {
		t.Fatalf("the session lost its state: %q", out.Stdout)
	}
	got := testenv.PluginAPIs(t, s)
	if got["python"] != 1 || got["jupyter"] != 1 || got["r"] != 2 {
		t.Fatalf("negotiated API versions %v; want 1 for the v1 builds, 2 for today's", got)
	}
}

// A plugin built with this SDK (API 2 only) started by a core of API 1
// (testenv.V1Commit's sdk/pluginhost, what a core of that release launches plugins
// with) ends with a message naming both versions and what to do.
func TestV2PluginOnV1Core(t *testing.T) {
	testenv.Require(t)
	// The launch a v1 core does, as a program of the v1 tree.
	launcher := filepath.Join(testenv.SourceV1(t), "plugins", "v1launch")
	if err := os.MkdirAll(launcher, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(launcher, "main.go"), []byte(v1Launcher), 0o644); err != nil {
		t.Fatal(err)
	}
	v1core := testenv.BuildV1(t, "plugins/v1launch")["plugins/v1launch"]
	plugin := testenv.BuildPlugin(t, "../../plugins/python")
	out, _ := exec.Command(v1core, plugin).CombinedOutput()
	msg := string(out)
	t.Log(msg)
	for _, want := range []string{"Plugin version: 2", "this core speaks plugin API versions [1]", "upgrade", "offers only 1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the v1 core's refusal lacks %q:\n%s", want, msg)
		}
	}
}

// v1Launcher launches the plugin named by its argument with v1's
// pluginhost, and prints the error and the plugin's log.
const v1Launcher = `package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

func main() {
	var log strings.Builder
	c, err := pluginhost.Launch(os.Args[1], hclog.New(&hclog.LoggerOptions{Output: &log}), pluginhost.Options{})
	if err == nil {
		c.Kill()
	}
	fmt.Printf("%v\n%s", err, log.String())
}
`
