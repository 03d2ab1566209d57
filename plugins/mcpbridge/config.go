package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	redact "github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Config is what the core sends this plugin (forge.toml's [mcp_tools]):
// every key is the core's (forge:"core"), so [plugins.mcpbridge.config]
// accepts none; the servers are configured in [mcp_tools].
type Config struct {
	Servers     map[string]ServerConfig `json:"servers" forge:"core"`
	CallTimeout string                  `json:"call_timeout" forge:"core"`
	// The core sends every plugin its output limits (execution.max_output,
	// execution.max_image_size); 0: no limit of the bridge's own.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty" forge:"core"`
	MaxImageBytes  int64 `json:"max_image_bytes,omitempty" forge:"core"`
	// The container defaults the core sends every plugin too
	// (core/forge/pluginset.Settings); a bridge starts no container and
	// ignores them.
	DefaultMemory  string `json:"default_memory,omitempty" forge:"core"`
	DefaultTimeout int    `json:"default_timeout,omitempty" forge:"core"`
	MaxTimeout     int    `json:"max_timeout,omitempty" forge:"core"`
}

// ServerConfig is one MCP server: stdio (Command, Args, Env) or streamable
// HTTP (URL, Headers), never both.
type ServerConfig struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// DefaultCallTimeout applies when call_timeout is not set.
const DefaultCallTimeout = 30 * time.Second

// serverNameRE: a server name becomes a Python package and an R binding, so
// it must be an identifier in both, and it cannot contain the '.' of
// "server.tool". No leading '_': forge_tools/_client.py is the package's own.
var (
	serverNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// parsedConfig is a checked Config.
type parsedConfig struct {
	Servers     map[string]ServerConfig
	Names       []string // sorted server names
	CallTimeout time.Duration
	MaxOutput   int64 // bytes of a result (text + structured); 0: none
	MaxImage    int64 // bytes of one image; 0: none
}

// parseConfig decodes raw strictly: unknown keys, a server that is neither
// stdio nor HTTP, names that cannot be identifiers and bad durations are
// errors that say where and what to do. Secret values are never quoted.
func parseConfig(raw []byte) (*parsedConfig, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("mcpbridge configuration: %w (expected {\"servers\": {\"NAME\": {\"command\": ..., \"args\": [...], \"env\": {...}} or {\"url\": ..., \"headers\": {...}}}, \"call_timeout\": \"30s\"})", err)
		}
		if dec.More() {
			return nil, fmt.Errorf("mcpbridge configuration: trailing data after the JSON object")
		}
	}
	if c.MaxOutputBytes < 0 || c.MaxImageBytes < 0 {
		return nil, fmt.Errorf("mcpbridge configuration: max_output_bytes and max_image_bytes must not be negative")
	}
	pc := &parsedConfig{Servers: c.Servers, CallTimeout: DefaultCallTimeout, MaxOutput: c.MaxOutputBytes, MaxImage: c.MaxImageBytes}
	if c.CallTimeout != "" {
		d, err := time.ParseDuration(c.CallTimeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("mcpbridge configuration: call_timeout %q is not a positive duration (e.g. \"30s\", \"2m\")", c.CallTimeout)
		}
		pc.CallTimeout = d
	}
	// No servers is a valid, idle bridge: make build installs this plugin
	// beside every server, and a forge.toml without [mcp_tools.NAME] must
	// not log a plugin failure at each start; mcp_tools is then refused by
	// the core with what to configure.
	for name, s := range c.Servers {
		where := fmt.Sprintf("mcpbridge configuration: server %q", name)
		if !serverNameRE.MatchString(name) || reserved[name] {
			return nil, fmt.Errorf("%s: a server name must be a letter followed by up to 63 letters, digits or '_', and not a Python or R keyword (it becomes forge_tools.%s in Python and a binding in R): rename it", where, name)
		}
		switch {
		case s.Command != "" && s.URL != "":
			return nil, fmt.Errorf("%s: has both command (stdio) and url (HTTP): keep one", where)
		case s.Command == "" && s.URL == "":
			return nil, fmt.Errorf("%s: needs command (a stdio server) or url (a streamable HTTP server)", where)
		case s.Command != "":
			if len(s.Headers) > 0 {
				return nil, fmt.Errorf("%s: headers apply to url servers only; pass a stdio server's secrets in env", where)
			}
			if strings.ContainsRune(s.Command, 0) {
				return nil, fmt.Errorf("%s: command contains a NUL byte", where)
			}
			for i, a := range s.Args {
				if strings.ContainsRune(a, 0) {
					return nil, fmt.Errorf("%s: args[%d] contains a NUL byte", where, i)
				}
			}
			for k, v := range s.Env {
				if !envNameRE.MatchString(k) {
					return nil, fmt.Errorf("%s: env name %q is not a valid variable name (letters, digits, '_', not starting with a digit)", where, k)
				}
				if strings.ContainsRune(v, 0) {
					return nil, fmt.Errorf("%s: the value of env %s contains a NUL byte", where, k)
				}
			}
		default:
			if len(s.Env) > 0 || len(s.Args) > 0 {
				return nil, fmt.Errorf("%s: env and args apply to command servers only; pass a url server's secrets in headers", where)
			}
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%s: url is not an http:// or https:// URL with a host", where)
			}
			for k, v := range s.Headers {
				if !headerNameRE.MatchString(k) {
					return nil, fmt.Errorf("%s: header name %q is not a valid HTTP header name", where, k)
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return nil, fmt.Errorf("%s: the value of header %s contains a line break or NUL", where, k)
				}
			}
		}
		pc.Names = append(pc.Names, name)
	}
	sort.Strings(pc.Names)
	return pc, nil
}

// secrets are the values that must never leave the plugin: every env and
// header value, and a URL's password and query.
func (pc *parsedConfig) secrets() []string {
	var out []string
	for _, s := range pc.Servers {
		for _, v := range s.Env {
			out = append(out, v)
		}
		for _, v := range s.Headers {
			out = append(out, v)
			// "Bearer X": X alone may be echoed too.
			if _, tok, ok := strings.Cut(v, " "); ok {
				out = append(out, tok)
			}
		}
		if u, err := url.Parse(s.URL); err == nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
			}
			for _, vs := range u.Query() {
				out = append(out, vs...)
			}
		}
	}
	return out
}

// redactor replaces secret values in text, in the encodings a server is
// likely to print them in (JSON escapes, URL encoding, base64, hex, ...:
// sanitize.Secrets). Values shorter than 4 bytes are left alone: replacing
// "1" or "true" everywhere would garble every message and protects nothing.
type redactor struct{ s *redact.Secrets }

func newRedactor(secrets []string) redactor {
	return redactor{redact.NewSecrets(secrets, 4)}
}

func (r redactor) String(s string) string { return r.s.String(s) }

// JSON redacts a JSON document and keeps it valid JSON.
func (r redactor) JSON(raw []byte) []byte { return r.s.JSON(raw) }
