package pluginset

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// BridgeChoice remembers which bridge plugin got the servers.
type BridgeChoice struct {
	mu     sync.Mutex
	chosen string
}

// Chosen is the bridge plugin that got the servers ("": none yet).
func (c *BridgeChoice) Chosen() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chosen
}

// BridgeSettings gives the bridge plugin its servers (command, args, env,
// url, headers: secrets included, for it alone) and the call timeout, as
// {"servers": {NAME: {...}}, "call_timeout": "30s"}. Only one plugin gets
// them: bridge.plugin, else the first bridge plugin to start (plugins
// start in name order), which the choice remembers for PickBridge.
func BridgeSettings(cfg config.Config) (func(name string, typ plugin.Type) map[string]any, *BridgeChoice) {
	c := &BridgeChoice{chosen: cfg.Bridge.Plugin}
	servers := map[string]any{}
	for n, s := range cfg.MCPTools {
		servers[n] = map[string]any{"command": s.Command, "args": nonNil(s.Args), "env": nonNilMap(s.Env), "url": s.URL, "headers": nonNilMap(s.Headers)}
	}
	timeout := (time.Duration(cfg.Bridge.CallTimeout) * time.Second).String()
	return func(name string, typ plugin.Type) map[string]any {
		if typ != plugin.TypeBridge {
			return nil
		}
		c.mu.Lock()
		if c.chosen == "" {
			c.chosen = name
		}
		ok := c.chosen == name
		c.mu.Unlock()
		if !ok {
			return nil
		}
		return map[string]any{"servers": servers, "call_timeout": timeout}
	}, c
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// PickBridge chooses the bridge plugin among those loaded, or says why
// there is none. With several loaded and none configured it is the one
// that got the servers (got; the first to start), so that the servers'
// secrets are only ever in the plugin that is used.
func PickBridge(cfg config.Config, loaded []string, got string) (name, why string) {
	if want := cfg.Bridge.Plugin; want != "" {
		if slices.Contains(loaded, want) {
			return want, ""
		}
		return "", fmt.Sprintf("bridge.plugin = %q is not loaded as a bridge plugin (bridge plugins: %s); see `mcp-forge plugins`", want, orNone(loaded))
	}
	switch {
	case len(loaded) == 0:
		return "", "no bridge plugin is loaded"
	case len(loaded) == 1:
		return loaded[0], ""
	case slices.Contains(loaded, got):
		return got, ""
	}
	return "", fmt.Sprintf("several bridge plugins are loaded (%s): choose one with [bridge] plugin", strings.Join(loaded, ", "))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
