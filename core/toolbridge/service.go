package toolbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/approval"
	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Audit events of the bridge.
const (
	EventCall  = "bridge.call"  // one tool call from a sandbox, admitted or refused
	EventGrant = "bridge.grant" // a grant issued, extended or ended
)

// Rules a grant request or a call can break; every refusal is audited with one.
const (
	RuleUnavailable = "mcp-tools-unavailable" // no bridge plugin, or the backend cannot mount grants
	RuleUnknown     = "mcp-tools-unknown"     // a name that is no configured server or no tool of it
	RuleDenied      = "mcp-tools-denied"      // the policy denies the tool
	RuleNotGranted  = "bridge-not-granted"    // a call of a tool the run was not granted
	RuleApproval    = "bridge-approval"       // approval refused or impossible
	RuleBudget      = "bridge-budget"         // the run's call budget is spent
	RuleInvalid     = "bridge-invalid"        // a malformed request
)

// Error is a refused grant request: the caller can fix it.
type Error struct {
	Rule string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func refusal(rule, format string, args ...any) error {
	return &Error{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// Approver asks the user whether a call may proceed (MCP elicitation).
type Approver = approval.Approver

// BridgeFunc returns the running bridge plugin, starting it if needed.
type BridgeFunc func(ctx context.Context) (bridge.Bridge, error)

// Service issues grants and serves their sockets.
type Service struct {
	servers map[string]config.MCPTool
	bcfg    config.Bridge
	plugin  string // the bridge plugin's name
	get     BridgeFunc
	root    string // where grant directories live: <base>/tools
	rec     audit.Recorder
	log     hclog.Logger
	scrub   *sanitize.Secrets // the servers' env and header values, in any encoding

	mu       sync.Mutex
	grants   grant.Tokens[*Grant]
	cache    []bridge.Tool
	cachedAt time.Time
	listErr  error

	// ToolsTTL is how long a tool list is reused (the bridge follows
	// tools/list_changed; this only bounds how stale the core's view is).
	ToolsTTL time.Duration
}

// New returns a service for the configured servers, served by plugin (its
// name, for messages) through get. root must be a directory the policy
// lets containers mount read-only (<volumes.base_path>/tools).
func New(cfg config.Config, plugin string, get BridgeFunc, root string, rec audit.Recorder, log hclog.Logger) (*Service, error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("tool grants directory: %w", err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, fmt.Errorf("tool grants directory: %w", err)
	}
	s := &Service{servers: maps.Clone(cfg.MCPTools), bcfg: cfg.Bridge, plugin: plugin, get: get, root: root, rec: rec, log: log,
		scrub: secrets(cfg.MCPTools), ToolsTTL: 30 * time.Second}
	if n := s.sweep(time.Minute); n > 0 {
		log.Info("removed tool grant directories left by a previous run", "count", n)
	}
	return s, nil
}

// sweep removes grant directories nobody serves any more (a server that
// died): no socket answers there, and the directory is older than minAge
// (a grant being created has no listener for a moment). Live grants of
// another server sharing the base path always answer, so they stay.
func (s *Service) sweep(minAge time.Duration) int {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		dir := filepath.Join(s.root, e.Name())
		info, err := os.Lstat(dir)
		if err != nil || time.Since(info.ModTime()) < minAge {
			continue
		}
		if c, err := net.DialTimeout("unix", filepath.Join(dir, bridge.SocketName), 200*time.Millisecond); err == nil {
			c.Close()
			continue
		}
		if workspace.RemoveAll(dir) == nil {
			n++
		}
	}
	return n
}

// secrets scrubs the servers' env and header values (and the words of a
// header such as "Bearer <token>") from whatever the bridge sends back, in
// case a server or the plugin echoes them — in any encoding a tool is
// likely to print them in (JSON escapes, URL encoding, base64, hex: see
// sanitize.Secrets), not only as they are. Values shorter than 8 bytes are
// left alone, as the sandbox's own scrubber does.
func secrets(servers map[string]config.MCPTool) *sanitize.Secrets {
	var list []string
	for _, s := range servers {
		for _, v := range s.Env {
			list = append(list, v)
		}
		for _, v := range s.Headers {
			list = append(list, v)
			list = append(list, strings.Fields(v)...)
		}
	}
	return sanitize.NewSecrets(list, minSecret)
}

// minSecret is the shortest value scrubbed (runtime.Scrubber's bound).
const minSecret = 8

// Plugin is the bridge plugin's name.
func (s *Service) Plugin() string { return s.plugin }

// Servers lists the configured server names, sorted.
func (s *Service) Servers() []string { return slices.Sorted(maps.Keys(s.servers)) }

// Tools lists every tool of the configured servers (cached for ToolsTTL).
func (s *Service) Tools(ctx context.Context) ([]bridge.Tool, error) {
	s.mu.Lock()
	if !s.cachedAt.IsZero() && time.Since(s.cachedAt) < s.ToolsTTL && s.listErr == nil {
		t := s.cache
		s.mu.Unlock()
		return t, nil
	}
	s.mu.Unlock()
	b, err := s.get(ctx)
	var tools []bridge.Tool
	if err == nil {
		tools, err = b.ListTools(ctx)
	}
	if err != nil {
		// The text reaches clients (environment/info, the tools resource):
		// scrubbed, so not wrapped (the chain would hand out the original).
		err = fmt.Errorf("the bridge plugin %s could not list tools: %s", s.plugin, s.scrub.String(err.Error()))
	}
	var keep []bridge.Tool
	for _, t := range tools {
		if _, ok := s.servers[t.Server]; ok { // only what the operator configured
			keep = append(keep, t)
		}
	}
	s.mu.Lock()
	s.cache, s.cachedAt, s.listErr = keep, time.Now(), err
	s.mu.Unlock()
	return keep, err
}

// Decide is the policy of one tool ("server.tool" split in two), matched
// against its name and, when the bridge mapped it, the server's own name
// (from the last tool list: a grant's tools were in it when granted).
func (s *Service) Decide(server, tool string) Decision {
	cfg, ok := s.servers[server]
	if !ok {
		return Deny
	}
	return Decide(cfg, tool, s.originalName(server, tool))
}

// denied is the message for a tool the policy denies: the key of the
// configuration that denies it, that naming it in mcp_tools cannot help,
// and what the user can do instead. granted lists what the run may call
// ("" before a run).
func (s *Service) denied(server, tool, granted string) string {
	_, why := Why(server, s.servers[server], tool, s.originalName(server, tool))
	msg := fmt.Sprintf("tool %s.%s is denied by policy: %s in the server's configuration, so no run may be granted it or call it "+
		"(naming it in mcp_tools is refused too); ", server, tool, why)
	if granted != "" {
		msg += "call one of the tools this run was granted (" + granted + ") or another tool the policy allows (mcp://forge/tools/available lists each tool's policy)"
	} else {
		msg += "use a tool the policy allows (mcp://forge/tools/available lists each tool's policy)"
	}
	return msg + fmt.Sprintf(", or ask the operator to change mcp_tools.%s in forge.toml if this tool should be callable", server)
}

// originalName is the server's own name of a mapped tool, "" when unknown
// or not mapped.
func (s *Service) originalName(server, tool string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.cache {
		if t.Server == server && t.Name == tool {
			return t.OriginalName
		}
	}
	return ""
}

// Resolve expands mcp_tools names ("server" or "server.tool") into tool
// ids. A server grants every tool its policy does not deny; a tool must
// exist and not be denied. Errors are *Error naming what was wrong.
func (s *Service) Resolve(ctx context.Context, names []string) ([]string, error) {
	var bad []string
	for _, n := range names {
		server, _, _ := strings.Cut(n, ".")
		if _, ok := s.servers[server]; !ok {
			bad = append(bad, fmt.Sprintf("%q", n))
		}
	}
	if len(bad) > 0 && len(s.servers) == 0 {
		// The bridge plugin is loaded (bin/ ships one) but the operator named
		// no server: say what to configure, not just that the name is unknown.
		return nil, refusal(RuleUnknown, "mcp_tools %s: no such MCP server is configured (configured: none); an operator lists the servers sandbox code may call as [mcp_tools.NAME] in forge.toml (docs/tool-bridge.md)", strings.Join(bad, ", "))
	}
	if len(bad) > 0 {
		return nil, refusal(RuleUnknown, "mcp_tools %s: no such MCP server is configured (configured: %s); name a server or server.tool", strings.Join(bad, ", "), list(s.Servers()))
	}
	tools, err := s.Tools(ctx)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, n := range names {
		server, tool, one := strings.Cut(n, ".")
		if one {
			i := slices.IndexFunc(tools, func(t bridge.Tool) bool { return t.Server == server && t.Name == tool })
			if i < 0 {
				var have []string
				for _, t := range tools {
					if t.Server == server {
						have = append(have, t.Name)
					}
				}
				return nil, refusal(RuleUnknown, "mcp_tools %q: server %s has no tool %q (its tools: %s); see the resource mcp://forge/tools/available", n, server, tool, list(have))
			}
			if s.Decide(server, tool) == Deny {
				return nil, refusal(RuleDenied, "mcp_tools %q: %s", n, s.denied(server, tool, ""))
			}
			set[n] = true
			continue
		}
		offered, allowed := 0, 0
		for _, t := range tools {
			if t.Server == server {
				offered++
				if s.Decide(server, t.Name) != Deny {
					set[t.ID()] = true
					allowed++
				}
			}
		}
		switch {
		case offered == 0:
			return nil, refusal(RuleUnknown, "mcp_tools %q: the server lists no tools (is it down? environment/info shows the bridge's servers)", n)
		case allowed == 0:
			return nil, refusal(RuleDenied, "mcp_tools %q: the policy of mcp_tools.%s denies every tool the server offers", n, server)
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// IssueRequest asks for a grant.
type IssueRequest struct {
	Plugin   string   // the backend plugin that will create the container
	Client   string   // the MCP connection that asked (audit)
	Session  string   // the session's internal id, "" for a stateless run (audit)
	RunID    string   // the run (audit)
	Language string   // the language of the generated code
	Tools    []string // resolved tool ids (Resolve); may be empty for a session
	Approve  Approver // nil: approval impossible
}

// Issue creates a grant: its directory with the socket listening and the
// bridge's generated code for req.Tools. Close it when the run or session
// ends.
func (s *Service) Issue(ctx context.Context, req IssueRequest) (*Grant, error) {
	g := &Grant{s: s, token: grant.NewToken(), plugin: req.Plugin, language: req.Language, tools: map[string]bool{},
		sem: make(chan struct{}, s.bcfg.MaxConcurrentCalls)}
	g.Grant = grant.New(grant.Config{Rec: s.rec, Session: req.Session, MaxConns: MaxConns, Ended: func(string) error { return errClosed },
		Run: grant.Run{ID: req.RunID, Client: req.Client, Approve: req.Approve}})
	g.dir = filepath.Join(s.root, g.token)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create the tool grant directory: %w", err)
	}
	if err := g.listen(); err != nil {
		g.cancel()
		os.RemoveAll(g.dir)
		return nil, err
	}
	s.grants.Put(g.token, g.plugin, g)
	if err := g.Extend(ctx, req.Tools); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Grant looks up a grant for the host services: only a live grant issued
// to plugin resolves.
func (s *Service) Grant(plugin, token string) (*Grant, error) {
	g, ok := s.grants.Lookup(plugin, token)
	if !ok || g.Err() != nil {
		return nil, refusal(RuleNotGranted, "tools grant %q is not one the core issued to plugin %s for a live run", grant.Cut(token), plugin)
	}
	return g, nil
}

// Live counts open grants (tests, diagnostics).
func (s *Service) Live() int {
	return s.grants.Len()
}

// Close ends every grant (server shutdown).
func (s *Service) Close() {
	for _, g := range s.grants.All() {
		g.Close()
	}
}

func (s *Service) forget(g *Grant) {
	s.grants.Remove(g.token)
}

// timeout is the per-call timeout of a server's tools.
func (s *Service) timeout(server string) time.Duration {
	if t := s.servers[server].CallTimeout; t > 0 {
		return time.Duration(t) * time.Second
	}
	return time.Duration(s.bcfg.CallTimeout) * time.Second
}

// ToolView is one tool of the resource mcp://forge/tools/available.
type ToolView struct {
	ID           string          `json:"id"`
	Server       string          `json:"server"`
	Name         string          `json:"name"`
	OriginalName string          `json:"original_name,omitempty"` // the server's own name when the bridge mapped it (policy globs match either)
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Policy       Decision        `json:"policy"`
}

// ServerView is one configured server: how it is reached (never its
// secrets) and its policy.
type ServerView struct {
	Name        string   `json:"name"`
	Transport   string   `json:"transport"` // "stdio" or "http"
	Default     Decision `json:"default_policy"`
	Allow       []string `json:"allow,omitempty"`
	Deny        []string `json:"deny,omitempty"`
	Approve     []string `json:"approve,omitempty"`
	CallTimeout string   `json:"call_timeout"`
	// MaxCallsPerRun: this server's calls per run (0: only the bridge's bound).
	MaxCallsPerRun int `json:"max_calls_per_run,omitempty"`
	Tools          int `json:"tools"`
}

// Available is what the resource shows: servers, tools with schemas and
// policy, and an error when the bridge could not list them.
type Available struct {
	Plugin         string       `json:"bridge_plugin"`
	MaxCallsPerRun int          `json:"max_calls_per_run"`
	Servers        []ServerView `json:"servers"`
	Tools          []ToolView   `json:"tools"`
	Error          string       `json:"error,omitempty"`
}

// Available lists the servers and tools with their policy.
func (s *Service) Available(ctx context.Context) Available {
	a := Available{Plugin: s.plugin, MaxCallsPerRun: s.bcfg.MaxCallsPerRun, Servers: []ServerView{}, Tools: []ToolView{}}
	tools, err := s.Tools(ctx)
	if err != nil {
		a.Error = err.Error()
	}
	count := map[string]int{}
	for _, t := range tools {
		count[t.Server]++
		// The bridge should have redacted these; the resource reaches the
		// client, so they are scrubbed here too.
		a.Tools = append(a.Tools, ToolView{ID: t.ID(), Server: t.Server, Name: t.Name, OriginalName: t.OriginalName, Description: s.scrub.String(t.Description),
			InputSchema: s.scrubJSON(t.InputSchema), OutputSchema: s.scrubJSON(t.OutputSchema), Policy: s.Decide(t.Server, t.Name)})
	}
	for _, n := range s.Servers() {
		c := s.servers[n]
		tr := "stdio"
		if c.URL != "" {
			tr = "http"
		}
		a.Servers = append(a.Servers, ServerView{Name: n, Transport: tr, Default: DefaultOf(c),
			Allow: c.Allow, Deny: c.Deny, Approve: c.Approve, CallTimeout: s.timeout(n).String(), MaxCallsPerRun: c.MaxCallsPerRun, Tools: count[n]})
	}
	return a
}

// Health is the bridge's state for environment/info: per server, whether
// it answered the last tool listing with tools.
func (s *Service) Health(ctx context.Context) map[string]any {
	tools, err := s.Tools(ctx)
	servers := map[string]any{}
	for _, n := range s.Servers() {
		c := 0
		for _, t := range tools {
			if t.Server == n {
				c++
			}
		}
		st := "ok"
		if err != nil {
			st = "unknown"
		} else if c == 0 {
			st = "no tools (down or empty)"
		}
		servers[n] = map[string]any{"status": st, "tools": c}
	}
	out := map[string]any{"plugin": s.plugin, "servers": servers, "live_grants": s.Live()}
	if err != nil {
		out["error"] = err.Error()
	}
	return out
}

// scrubJSON is raw without the servers' secrets, still valid JSON (nil
// when raw is not JSON and held one).
func (s *Service) scrubJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	out := s.scrub.JSON(raw)
	if !json.Valid(out) {
		return nil
	}
	return out
}

var errClosed = errors.New("the tool grant has ended")

// ruleClosed ends a grant by Close (the run or session ended).
const ruleClosed = "bridge-grant-closed"
