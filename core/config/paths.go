package config

import (
	"os/user"
	"path/filepath"
	"strconv"
)

// Lookup reads an environment variable; os.LookupEnv in production.
type Lookup func(string) (string, bool)

// DefaultFor is the built-in configuration for a server running with
// effective uid euid. Root gets system directories; any other user cannot
// write those, so (as a desktop user running rootless Podman) it gets the
// XDG base directories of its own home instead:
//
//	volumes.base_path                   $XDG_DATA_HOME/mcp-forge   (~/.local/share/mcp-forge)
//	security.audit_log                  $XDG_STATE_HOME/mcp-forge/audit.log   (~/.local/state/...)
//	environment_builder.uv_cache_path   $XDG_CACHE_HOME/mcp-forge/uv   (~/.cache/...)
//
// A file or FORGE_* variable still overrides them. env is consulted for
// HOME and the XDG variables only.
func DefaultFor(euid int, env Lookup) Config {
	c := systemDefault()
	if euid == 0 {
		return c
	}
	home := lookupAbs(env, "HOME")
	if home == "" {
		if u, err := user.LookupId(strconv.Itoa(euid)); err == nil && filepath.IsAbs(u.HomeDir) {
			home = u.HomeDir
		}
	}
	xdg := func(name, fallback string) string {
		if d := lookupAbs(env, name); d != "" {
			return d
		}
		if home == "" {
			return ""
		}
		return filepath.Join(home, fallback)
	}
	// With no home at all the system paths stay, and the first write names
	// the setting to change.
	if d := xdg("XDG_DATA_HOME", ".local/share"); d != "" {
		c.Volumes.BasePath = filepath.Join(d, "mcp-forge")
	}
	if d := xdg("XDG_STATE_HOME", ".local/state"); d != "" {
		c.Security.AuditLog = filepath.Join(d, "mcp-forge", "audit.log")
	}
	if d := xdg("XDG_CACHE_HOME", ".cache"); d != "" {
		c.EnvironmentBuilder.UVCachePath = filepath.Join(d, "mcp-forge", "uv")
	}
	return c
}

// lookupAbs returns an environment variable that holds an absolute path;
// the XDG specification says relative values are to be ignored.
func lookupAbs(env Lookup, name string) string {
	if env == nil {
		return ""
	}
	v, ok := env(name)
	if !ok || !filepath.IsAbs(v) {
		return ""
	}
	return filepath.Clean(v)
}
