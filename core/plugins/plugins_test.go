package plugins

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

func TestChecksumMismatchRefuses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mcp-forge-plugin-x")
	os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	sum, _ := Checksum(p)
	wrong := strings.Repeat("0", 64)
	status, err := Entry{Name: "x", Path: p, SHA256: wrong}.Verify()
	if err == nil || status != "MISMATCH" || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), sum) {
		t.Fatalf("want a refusal naming both digests, got %q %v", status, err)
	}
	if status, err := (Entry{Name: "x", Path: p, SHA256: sum}).Verify(); err != nil || status != "verified" {
		t.Fatalf("matching digest: %q %v", status, err)
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"mcp-forge-plugin-a", "mcp-forge-plugin-b", "other"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "mcp-forge-plugin-noexec"), []byte("x"), 0o644)
	cfg := config.Default()
	cfg.Plugins["b"] = config.PluginSpec{Path: "/opt/b", SHA256: strings.Repeat("A", 64)}
	got := Discover(cfg, dir)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" || got[1].Path != "/opt/b" || got[1].SHA256 != strings.Repeat("a", 64) {
		t.Fatalf("%+v", got)
	}
}

// A plugin that speaks only an API version this core lacks is refused, and
// the message names both sides' versions.
func TestIncompatibleAPIVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mcp-forge-plugin-future")
	build := exec.Command("go", "build", "-o", bin, "./testdata/v2plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, out)
	}
	_, err := pluginhost.Launch(bin, hclog.NewNullLogger(), pluginhost.Options{})
	if err == nil {
		t.Fatal("incompatible plugin launched")
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "incompatible") || !strings.Contains(msg, "2") || !strings.Contains(msg, "this core speaks plugin API versions [1]") {
		t.Fatalf("message does not name both versions: %s", msg)
	}
}
