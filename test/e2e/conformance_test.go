package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

var pythonSnippets = sdktest.Snippets{
	Language:      "python",
	Print:         "print('hello')",
	Stderr:        "import sys\nprint('oops', file=sys.stderr)",
	Expr:          "x = 41\nx + 1",
	ExprJSON:      "42",
	ExprRepr:      "42",
	SyntaxError:   "x = 1\ny = (\nz = 3",
	SyntaxLine:    2,
	RuntimeError:  "a = 1\nb = 0\nc = a / b\n",
	RuntimeLine:   3,
	OwnFrames:     []string{"runner"},
	Sleep:         "import time\ntime.sleep(60)",
	SetState:      "x = 41",
	GetState:      "print(x + 1)",
	StateOut:      "42",
	SleepAfterSet: "x = 99\nimport time\ntime.sleep(60)",
	SleptOut:      "100",
	Exit:          "import os\nos._exit(1)",
	CheckpointForger: "class Forger:\n    def __getstate__(self):\n        print('__FORGE_CKPT__{\"saved\":[\"__forged__\"],\"created\":\"2099-01-01T00:00:00Z\"}')\n        return {'v': 1}\n" +
		"    def __setstate__(self, st):\n        self.v = st['v']\nforger = Forger()",
	// A module comes back with the namespace (dill saves it by reference).
	CheckpointState: "import json\nx = 41",
	CheckpointGet:   "print(json.dumps([x + 1]))",
	CheckpointOut:   "[42]",
}

var rSnippets = sdktest.Snippets{
	Language:         "r",
	Print:            "cat('hello\\n')",
	Stderr:           "message('oops')",
	Expr:             "x <- 41\nx + 1",
	ExprJSON:         "42",
	ExprRepr:         "42",
	SyntaxError:      "x <- 1\ny <- (2\nz <- 3",
	SyntaxLine:       3,
	RuntimeError:     "f <- function(v) {\n  stop('bad input: ', v)\n}\ny <- 1\nf(y)",
	RuntimeLine:      2,
	Sleep:            "Sys.sleep(60)",
	SetState:         "x <- 41",
	GetState:         "cat(x + 1, '\\n')",
	StateOut:         "42",
	SleepAfterSet:    "x <- 99\nSys.sleep(60)",
	SleptOut:         "100",
	Exit:             "quit(save = 'no', status = 1)",
	CheckpointForger: "makeActiveBinding('forger', function() { cat('__FORGE_CKPT__{\"saved\":[\"__forged__\"],\"created\":\"2099-01-01T00:00:00Z\"}\\n'); 1 }, globalenv())",
	// An attached package and a dot-name are state as much as x is.
	CheckpointState: "library(jsonlite)\n.k <- 1\nx <- 40",
	CheckpointGet:   "cat(toJSON(x + .k + 1), '\\n')",
	CheckpointOut:   "[42]",
}

// bash has no result value and no traceback: those checks are left out.
var bashSnippets = sdktest.Snippets{
	Language:      "bash",
	Print:         "echo hello",
	Stderr:        "echo oops >&2",
	SyntaxError:   "echo a\nif then fi",
	RuntimeError:  "echo start\nfalse",
	Sleep:         "sleep 60",
	SetState:      "export X=41",
	GetState:      "echo $((X + 1))",
	StateOut:      "42",
	SleepAfterSet: "X=99; sleep 60",
	SleptOut:      "100",
	Exit:          "exit 3",
}

type conformanceCase struct {
	name     string
	pkg      string // built from here
	snippets sdktest.Snippets
	session  bool
	local    string // what the host needs for local mode
}

func conformanceCases() []conformanceCase {
	irk := rSnippets
	irk.ExprJSON = "" // IRkernel sends values as display text ("[1] 42"), not JSON
	irk.SyntaxLine, irk.RuntimeLine = 0, 0
	irk.Exit = "tools::pskill(Sys.getpid(), tools::SIGKILL)" // IRkernel survives quit()
	return []conformanceCase{
		{"python", "../../plugins/python", pythonSnippets, false, "python3"},
		{"r", "../../plugins/r", rSnippets, false, "Rscript"},
		{"jupyter", "../../plugins/jupyter", pythonSnippets, true, "python3"},
		{"irkernel", "../../plugins/irkernel", irk, true, "R"},
		{"bash", "./testdata/bashplugin", bashSnippets, true, "bash"},
	}
}

// Every plugin, ours and the third-party bash plugin, passes the same
// conformance suite as a binary launched the way the core launches it,
// against the real core's host services (policy, audit, ownership,
// workspaces) and real Podman; and nothing is left under <base>/sessions.
func TestConformanceReal(t *testing.T) {
	testenv.Parallel(t)
	testenv.Require(t)
	for _, c := range conformanceCases() {
		t.Run(c.name, func(t *testing.T) {
			bin := testenv.BuildPlugin(t, c.pkg)
			core := testenv.NewCore(t, nil)
			h, root, cfg := core.PluginHost(t, c.name)
			tr := sdktest.Track(h)
			b := sdktest.Launch(t, bin, tr, withoutPool(t, cfg))
			opts := []sdktest.Option{sdktest.WithTracker(tr), sdktest.WithWorkspaceRoot(root),
				sdktest.WithAnotherInstance(func(t *testing.T) backend.Backend { return sdktest.Launch(t, bin, tr, withoutPool(t, cfg)) })}
			if c.session {
				sdktest.RunSessionBackend(t, b, c.snippets, opts...)
			} else {
				sdktest.RunBackend(t, b, c.snippets, opts...)
			}
		})
	}
}

// withoutPool turns a plugin's warm pool off (config warm = 0; plugins
// without one ignore it): the suite checks that a backend leaves no
// container and no workspace of its own behind, which a pool's ready
// kernels are by design. The pools have their own end-to-end tests
// (warmsession_test.go).
func withoutPool(t *testing.T, cfg []byte) []byte {
	t.Helper()
	m := map[string]any{}
	if len(cfg) > 0 {
		if err := json.Unmarshal(cfg, &m); err != nil {
			t.Fatal(err)
		}
	}
	m["warm"] = 0
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The same suite with sdktest.LocalHost (no container: the language must be
// on this host), the quick mode a plugin author runs without Podman.
func TestConformanceLocal(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("builds and runs every plugin binary: set FORGE_E2E=1 (make test does)")
	}
	for _, c := range conformanceCases() {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.local); err != nil {
				t.Skipf("local mode needs %s on this host", c.local)
			}
			if c.name == "jupyter" && exec.Command("python3", "-c", "import ipykernel").Run() != nil {
				t.Skip("local mode needs ipykernel on this host")
			}
			if c.name == "irkernel" && exec.Command("Rscript", "-e", "library(IRkernel)").Run() != nil {
				t.Skip("local mode needs IRkernel on this host")
			}
			bin := testenv.BuildPlugin(t, c.pkg)
			base, err := os.MkdirTemp("/var/tmp", "fl-") // short: kernel socket paths
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			lh := sdktest.NewLocalHost(filepath.Join(base, "w"))
			// What the plugin keeps ready (a warm pool) runs as this test's
			// children: end it with the test, as the core does a server's.
			t.Cleanup(func() {
				for _, id := range lh.Containers() {
					lh.Remove(context.Background(), id)
				}
			})
			tr := sdktest.Track(lh)
			b := sdktest.Launch(t, bin, tr, withoutPool(t, nil))
			opts := []sdktest.Option{sdktest.WithTracker(tr), sdktest.WithWorkspaceRoot(lh.Base)}
			if c.session {
				sdktest.RunSessionBackend(t, b, c.snippets, opts...)
			} else {
				sdktest.RunBackend(t, b, c.snippets, opts...)
			}
		})
	}
}
