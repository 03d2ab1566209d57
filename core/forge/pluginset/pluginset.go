// Package pluginset is the plugins as a core runs them, from its
// configuration: where they are found (and the agent binary beside them),
// what each is told (the output limits and defaults, the MCP servers of
// the one bridge plugin that is used, a builder's paths and work
// directory), the message size their connections carry, and an inspection
// that starts them only to learn what they are (inspect.go).
package pluginset

import (
	"os"
	"path/filepath"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

// Dir is where default plugins are looked for.
func Dir(cfg config.Config) string {
	if cfg.Server.PluginDir != "" {
		return cfg.Server.PluginDir
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Dir(exe)
}

// Agent is the host's mcp-forge-agent, which the Podman runtime mounts
// into every sandbox: beside the plugins (make build and make install put
// it there), or "" when there is none that could run.
func Agent(cfg config.Config) string {
	p := filepath.Join(Dir(cfg), agent.Binary)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o005 != 0o005 {
		return ""
	}
	return p
}

// Settings is what the core tells every plugin: the output limits, and
// the default memory and timeouts (a warm pool creates containers before
// any request says its limits).
// Nothing here depends on which plugin it is: a backend's image is its own
// setting ([plugins.NAME.config] image, merged over these by the plugin
// manager), by default the image the plugin declares.
func Settings(cfg config.Config) func(string) map[string]any {
	maxOut, maxImg := int64(cfg.Execution.MaxOutput), int64(cfg.Execution.MaxImageSize)
	return func(string) map[string]any {
		// default_memory travels as the configuration writes it ("512m"):
		// that is the plugins' wire format.
		return map[string]any{"max_output_bytes": maxOut, "max_image_bytes": maxImg,
			"default_memory": cfg.Execution.DefaultMemory.String(), "default_timeout": cfg.Execution.DefaultTimeout, "max_timeout": cfg.Execution.LongestTimeout()}
	}
}

// MessageLimit is the gRPC message size plugin connections need to carry
// code up to execution.max_code_size, output up to execution.max_output and
// images up to execution.max_image_size.
func MessageLimit(cfg config.Config) int {
	return plugin.MessageLimit(int64(cfg.Execution.MaxCodeSize), int64(cfg.Execution.MaxOutput), int64(cfg.Execution.MaxImageSize))
}

// ConfigureBuilders sets how pm starts builders: every plugin in its own work
// directory (environments.WorkDir; API v2 names it in no message), the
// aliases environment_builder.uv_cache_path and find_links copied into each
// builder's settings as uv_cache_path and find_links (under the operator's
// [plugins.NAME.config], so the plugin's own keys win), and for builders
// of API v1 the same paths in the request fields v1 has.
func ConfigureBuilders(cfg config.Config, pm *plugins.Manager) {
	eb := cfg.EnvironmentBuilder
	pm.WorkDir = func(name string) string { return environments.WorkDir(cfg.Volumes.BasePath, name) }
	pm.V1Builder = pluginhost.V1BuilderPaths{CacheDir: eb.UVCachePath, FindLinks: eb.FindLinks}
	aliases := map[string]any{}
	if eb.UVCachePath != "" {
		aliases["uv_cache_path"] = eb.UVCachePath
	}
	if len(eb.FindLinks) > 0 {
		aliases["find_links"] = eb.FindLinks
	}
	others := pm.TypeSettings
	pm.TypeSettings = func(name string, typ plugin.Type) map[string]any {
		if typ == plugin.TypeBuilder {
			return aliases
		}
		if others == nil {
			return nil
		}
		return others(name, typ)
	}
}
