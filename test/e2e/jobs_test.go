package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Background jobs through the official TypeScript SDK over stdio
// (test/node/jobs.mjs): a long stateless job answered at once, subscribed
// to, polled while running and waited for past the client's request
// timeout (progress resets it); session jobs in Python and R holding their
// sessions and cancelled with the state kept; the start overhead against a
// foreground call. The job lasts FORGE_TEST_JOB_SECONDS (30; the issue's
// figure is 180).
func TestTypeScriptSDKJobs(t *testing.T) {
	testenv.Parallel(t)
	dir, cfg := nodeSetup(t, "sdk")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[execution]\nprogress_interval = 2\n")
	f.Close()
	cmd := exec.Command("node", "jobs.mjs", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "JOB_SECONDS="+envOr("FORGE_TEST_JOB_SECONDS", "30"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: job=") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("%s", lastLine(string(out), "ok: "))

	// Each cancel_job is audited, and the run's cancellation says by whom.
	cancels, interrupted := 0, map[string]bool{}
	for _, e := range auditEntries(t, filepath.Join(filepath.Dir(cfg), "audit.log")) { // containment_test.go
		switch {
		case e.Event == "job.cancel":
			cancels++
		case e.Event == "execution.cancelled" && e.Details["cause"] == "cancel_job was called":
			interrupted[fmt.Sprint(e.Details["session"], "/", e.Details["outcome"])] = true
		}
	}
	if cancels != 2 || !interrupted["job-python/interrupted"] || !interrupted["job-r/interrupted"] {
		t.Fatalf("job.cancel ×%d (want 2), cancellations %v (want job-python and job-r interrupted)", cancels, interrupted)
	}
}
