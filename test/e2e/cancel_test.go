package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Through the official TypeScript SDK over stdio (test/node/cancel.mjs): a
// foreground call longer than the client's request timeout succeeds because
// progress resets it, stateless as it is (no output: keep-alives alone),
// while the same call without the reset times out; a session call cancelled
// with an AbortSignal, Python's and R's, is interrupted with its state kept, the loop stopped,
// the session answering at once, and the cancellation is audited.
//
// Durations are small by default (progress_interval 2 s, a 12 s call, an 8
// s client timeout); the figures are
// FORGE_TEST_PROGRESS_INTERVAL=10 FORGE_TEST_CALL_SECONDS=90 FORGE_TEST_CLIENT_TIMEOUT_MS=60000.
func TestTypeScriptSDKProgressAndCancel(t *testing.T) {
	dir, cfg := nodeSetup(t, "sdk")
	interval := envOr("FORGE_TEST_PROGRESS_INTERVAL", "2")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[execution]\nprogress_interval = %s\n", interval)
	f.Close()
	cmd := exec.Command("node", "cancel.mjs", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CALL_SECONDS="+envOr("FORGE_TEST_CALL_SECONDS", "12"), "CLIENT_TIMEOUT_MS="+envOr("FORGE_TEST_CLIENT_TIMEOUT_MS", "8000"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: long=") {
		t.Fatalf("TypeScript client: %v\n%s", err, out)
	}
	t.Logf("progress_interval=%s s: %s", interval, lastLine(string(out), "ok: "))

	// The audit log has the session's cancellation, interrupted, and the
	// control call's (stateless, stopped).
	log, err := os.Open(filepath.Join(filepath.Dir(cfg), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	outcomes := map[string]bool{}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Event   string         `json:"event"`
			Details map[string]any `json:"details"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "execution.cancelled" && e.Details["reason"] == "cancelled" {
			outcomes[fmt.Sprint(e.Details["session"], "/", e.Details["outcome"])] = true
		}
	}
	if !outcomes["cancel-python/interrupted"] || !outcomes["cancel-r/interrupted"] || !outcomes["<nil>/stopped"] {
		t.Fatalf("execution.cancelled outcomes %v, want cancel-python/interrupted, cancel-r/interrupted and a stateless stopped", outcomes)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func lastLine(out, prefix string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}
