package pluginset

import (
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// The servers (with their secrets) go to one bridge plugin only: the
// configured one, else the first to start; never to a backend.
func TestBridgeSettings(t *testing.T) {
	cfg := config.Default()
	cfg.MCPTools = map[string]config.MCPTool{"m": {Command: "npx", Env: map[string]string{"K": "secret"}}}
	cfg.Bridge.CallTimeout = 7
	s, _ := BridgeSettings(cfg)
	if got := s("python", plugin.TypeBackend); got != nil {
		t.Fatalf("a backend got %v", got)
	}
	got := s("b1", plugin.TypeBridge)
	srv, _ := got["servers"].(map[string]any)
	m, _ := srv["m"].(map[string]any)
	if got["call_timeout"] != "7s" || m["command"] != "npx" || m["env"].(map[string]string)["K"] != "secret" {
		t.Fatalf("%v", got)
	}
	if s("b2", plugin.TypeBridge) != nil {
		t.Fatal("a second bridge plugin got the servers")
	}
	if s("b1", plugin.TypeBridge) == nil {
		t.Fatal("the chosen bridge lost its servers on restart")
	}
	cfg.Bridge.Plugin = "b2"
	if s, _ := BridgeSettings(cfg); s("b1", plugin.TypeBridge) != nil || s("b2", plugin.TypeBridge) == nil {
		t.Fatal("bridge.plugin is not the one configured")
	}
}

func TestPickBridge(t *testing.T) {
	cfg := config.Default()
	for _, tc := range []struct {
		want   string
		loaded []string
		name   string
		why    string
	}{
		{"", nil, "", "no bridge plugin is loaded"},
		{"", []string{"a"}, "a", ""},
		{"", []string{"a", "b"}, "", "choose one with [bridge] plugin"},
		{"b", []string{"a", "b"}, "b", ""},
		{"c", []string{"a"}, "", `bridge.plugin = "c" is not loaded`},
	} {
		cfg.Bridge.Plugin = tc.want
		name, why := PickBridge(cfg, tc.loaded, "")
		if name != tc.name || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("PickBridge(%q, %v) = %q, %q", tc.want, tc.loaded, name, why)
		}
	}
}

// With several bridges and none configured, the one that got the servers
// (and their secrets) is the one used: never a plugin without them.
func TestBridgeWithTheServersIsUsed(t *testing.T) {
	cfg := config.Default()
	cfg.MCPTools = map[string]config.MCPTool{"mem": {Command: "x", Env: map[string]string{"TOKEN": "s3cret"}}}
	settings, choice := BridgeSettings(cfg)
	if got := settings("b", plugin.TypeBridge); got["servers"] == nil {
		t.Fatal("the first bridge to start got no servers")
	}
	if got := settings("a", plugin.TypeBridge); got != nil {
		t.Fatalf("a second bridge got the servers too: %v", got)
	}
	if name, why := PickBridge(cfg, []string{"a", "b"}, choice.Chosen()); name != "b" {
		t.Fatalf("PickBridge = %q (%s), want b, which holds the servers", name, why)
	}
}
