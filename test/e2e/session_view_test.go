package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// The session view, an MCP App, rendered by headless Chromium inside a
// minimal host that implements the Apps bridge against a live server
// (test/node/session-view.mjs), the host side being the extension's own AppBridge: a DataFrame's columns and a plot shown,
// no serious accessibility finding (axe-core), hostile values shown as
// text, a later execute seen without the host's help, a stateless run.
// The screenshots are kept: in $FORGE_TEST_ARTIFACTS/session-view when
// set (make test sets it), else in a directory the log names.
func TestSessionViewInBrowser(t *testing.T) {
	testenv.Parallel(t)
	dir, cfg := nodeSetup(t, "sdk")
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no Chromium at %s (Debian's chromium package; make test installs it): %v", chromium, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed: run `npm ci` in test/node (make test does)")
	}
	artifacts := t.TempDir()
	if a := os.Getenv("FORGE_TEST_ARTIFACTS"); a != "" {
		artifacts = filepath.Join(a, "session-view")
	} else if d, err := os.MkdirTemp("", "forge-session-view-"); err == nil {
		artifacts = d
	}
	cmd := exec.Command("node", "session-view.mjs", testenv.Binary(t), "--config", cfg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ARTIFACTS="+artifacts, "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: session view rendered") {
		t.Fatalf("session view: %v\n%s", err, out)
	}
	t.Logf("%s", lastLine(string(out), "ok: "))
}
