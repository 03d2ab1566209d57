package config

import (
	"bytes"

	"github.com/BurntSushi/toml"
)

// Render prints the effective configuration as TOML with every value of
// mcp_tools env and headers tables (all are secrets for the bridge) and
// secret-looking plugin config values replaced by "***".
func Render(c Config) (string, error) {
	masked := c
	masked.MCPTools = make(map[string]MCPTool, len(c.MCPTools))
	for name, t := range c.MCPTools {
		t.Env, t.Headers = maskAll(t.Env), maskAll(t.Headers)
		masked.MCPTools[name] = t
	}
	masked.Plugins = make(map[string]PluginSpec, len(c.Plugins))
	for name, p := range c.Plugins {
		p.Config = maskMap(p.Config)
		masked.Plugins[name] = p
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(masked); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func maskMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			out[k] = maskMap(x)
		default:
			if IsSecretKey(k) {
				v = "***"
			}
			out[k] = v
		}
	}
	return out
}

// maskAll keeps a table's keys and hides every value.
func maskAll(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = "***"
	}
	return out
}
