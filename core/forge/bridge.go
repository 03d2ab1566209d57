package forge

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// BridgeSettings gives the bridge plugin its servers (command, args, env,
// url, headers: secrets included, for it alone) and the call timeout, as
// {"servers": {NAME: {...}}, "call_timeout": "30s"}. Only one plugin gets
// them: bridge.plugin, else the first bridge plugin to start.
func BridgeSettings(cfg config.Config) func(name, typ string) map[string]any {
	var mu sync.Mutex
	chosen := cfg.Bridge.Plugin
	servers := map[string]any{}
	for n, s := range cfg.MCPTools {
		servers[n] = map[string]any{"command": s.Command, "args": nonNil(s.Args), "env": nonNilMap(s.Env), "url": s.URL, "headers": nonNilMap(s.Headers)}
	}
	timeout := (time.Duration(cfg.Bridge.CallTimeout) * time.Second).String()
	return func(name, typ string) map[string]any {
		if typ != plugin.TypeBridge {
			return nil
		}
		mu.Lock()
		if chosen == "" {
			chosen = name
		}
		ok := chosen == name
		mu.Unlock()
		if !ok {
			return nil
		}
		return map[string]any{"servers": servers, "call_timeout": timeout}
	}
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

// pickBridge chooses the bridge plugin among those loaded, or says why
// there is none.
func pickBridge(cfg config.Config, loaded []string) (string, string) {
	if want := cfg.Bridge.Plugin; want != "" {
		if slices.Contains(loaded, want) {
			return want, ""
		}
		return "", fmt.Sprintf("bridge.plugin = %q is not loaded as a bridge plugin (bridge plugins: %s); see `mcp-forge plugins`", want, orNone(loaded))
	}
	switch len(loaded) {
	case 0:
		return "", "no bridge plugin is loaded"
	case 1:
		return loaded[0], ""
	}
	return "", fmt.Sprintf("several bridge plugins are loaded (%s): choose one with [bridge] plugin", strings.Join(loaded, ", "))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
