package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Hostile answers from a hostile review of server.max_message: sandbox code
// and client arguments that make an answer an error although the run
// succeeded, lose a job's result, serve the wrong part of a file, or crash
// the server (test/node/attack-answers.mjs; each attack prints one line).
func TestTypeScriptSDKAttackAnswers(t *testing.T) {
	testenv.Parallel(t)
	dir, cfg := nodeSetup(t, "sdk")
	cmd := exec.Command("node", "attack-answers.mjs", "stdio", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "done:") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
