package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Bridge is the plugin's bridge.Bridge over a manager.
type Bridge struct {
	m *manager
}

// live are the managers of this process, closed when the plugin exits.
var live struct {
	sync.Mutex
	ms []*manager
}

// New is the plugin factory: it checks the configuration and starts every
// server in the background (a server that fails is reported per server
// and tried again on next use; it does not stop the others).
func New(_ host.Host, cfg backend.Config) (bridge.Bridge, error) {
	// JSON on stderr, which the core re-emits (stdout belongs to go-plugin).
	return newBridge(cfg, plugin.Logger(Info.Name))
}

func newBridge(cfg backend.Config, log hclog.Logger) (*Bridge, error) {
	pc, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	m := newManager(pc, log)
	live.Lock()
	live.ms = append(live.ms, m)
	live.Unlock()
	for _, s := range m.servers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), pc.CallTimeout)
			defer cancel()
			if _, _, err := s.session(ctx); err != nil {
				log.Warn("MCP server did not start; the next use tries again", "server", s.name, "error", err.Error())
			}
		}()
	}
	return &Bridge{m: m}, nil
}

// closeAll ends every server of every bridge of this process.
func closeAll() {
	live.Lock()
	ms := live.ms
	live.ms = nil
	live.Unlock()
	for _, m := range ms {
		m.Close()
	}
}

// Close ends this bridge's servers.
func (b *Bridge) Close() { b.m.Close() }

// ListTools lists every server's tools (servers are listed in parallel). A
// server that is down is left out and logged; only when none answers is
// it an error, naming each server and why.
func (b *Bridge) ListTools(ctx context.Context) ([]bridge.Tool, error) {
	type res struct {
		tools []bridge.Tool
		err   error
	}
	names := b.m.cfg.Names
	out := make([]res, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, b.m.cfg.CallTimeout)
			defer cancel()
			t, err := b.m.servers[name].listTools(cctx)
			out[i] = res{t, err}
		}()
	}
	wg.Wait()
	var tools []bridge.Tool
	var errs []string
	for i, r := range out {
		if r.err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", names[i], r.err))
			b.m.log.Warn("MCP server is down; its tools are not listed", "server", names[i], "error", r.err.Error())
			continue
		}
		tools = append(tools, r.tools...)
	}
	if len(tools) == 0 && len(errs) > 0 {
		return nil, fmt.Errorf("no MCP server answered: %s", strings.Join(errs, "; "))
	}
	return tools, nil
}

// Health reports each server: "ok", or why it is down.
func (b *Bridge) Health() map[string]string {
	out := map[string]string{}
	for name, s := range b.m.servers {
		out[name] = s.health()
	}
	return out
}

func errResult(format string, a ...any) bridge.CallResult {
	return bridge.CallResult{IsError: true, Message: fmt.Sprintf(format, a...)}
}

// CallTool calls req.Server's tool req.Tool (its mapped name). Everything
// the server answers, and every error, passes the redactor: a server may
// echo its own secrets.
func (b *Bridge) CallTool(ctx context.Context, req bridge.CallRequest) (bridge.CallResult, error) {
	s := b.m.servers[req.Server]
	if s == nil {
		have := strings.Join(b.m.cfg.Names, ", ")
		if have == "" {
			have = "none"
		}
		return errResult("no MCP server %q is configured (servers: %s)", req.Server, have), nil
	}
	args := map[string]any{}
	if a := strings.TrimSpace(string(req.Arguments)); a != "" && a != "null" {
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return errResult("arguments of %s.%s are not a JSON object: %v", req.Server, req.Tool, err), nil
		}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = b.m.cfg.CallTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	sess, done, err := s.session(cctx)
	if err != nil {
		if ctx.Err() != nil {
			return bridge.CallResult{}, ctx.Err()
		}
		return errResult("MCP server %s is down: %v; the next call starts it again", req.Server, err), nil
	}
	s.mu.Lock()
	orig, ok := s.orig[req.Tool]
	var known []string
	if !ok {
		for _, t := range s.tools {
			known = append(known, t.Name)
		}
	}
	s.mu.Unlock()
	if !ok {
		if len(known) > 20 {
			known = append(known[:20], "...")
		}
		return errResult("MCP server %s has no tool %q (its tools: %s)", req.Server, req.Tool, strings.Join(known, ", ")), nil
	}

	start := time.Now()
	res, err := sess.CallTool(cctx, &mcp.CallToolParams{Name: orig, Arguments: args})
	if err != nil {
		ended := false
		select {
		case <-done:
			ended = true
		default:
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, mcp.ErrConnectionClosed) {
				// The session is ending: wait (bounded) for its reason.
				select {
				case <-done:
				case <-time.After(2 * time.Second):
				}
				ended = true
			}
		}
		if ended {
			reason := "it exited"
			s.mu.Lock()
			if s.sess == sess {
				s.mu.Unlock()
				s.dropSession(sess, b.m.red.String(err.Error()))
				s.mu.Lock()
			}
			if s.lastErr != "" {
				reason = s.lastErr
			}
			s.mu.Unlock()
			return errResult("MCP server %s stopped during the call of %s (%s); the next call starts it again", req.Server, req.Tool, reason), nil
		}
		if ctx.Err() != nil {
			return bridge.CallResult{}, ctx.Err()
		}
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return errResult("%s.%s timed out after %s", req.Server, req.Tool, timeout.Round(time.Millisecond)), nil
		}
		return errResult("%s.%s: %s", req.Server, req.Tool, b.m.red.String(err.Error())), nil
	}
	b.m.log.Debug("bridged call", "server", req.Server, "tool", req.Tool, "duration", time.Since(start), "is_error", res.IsError)
	return b.convert(req, res), nil
}

// convert turns an MCP result into a CallResult: structuredContent when
// present, else the text blocks joined; images as images; an error result
// as IsError with the tool's text as the message.
func (b *Bridge) convert(req bridge.CallRequest, res *mcp.CallToolResult) bridge.CallResult {
	red := b.m.red
	var text []string
	var out bridge.CallResult
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			text = append(text, c.Text)
		case *mcp.ImageContent:
			ext := "bin"
			if exts, _ := mime.ExtensionsByType(c.MIMEType); len(exts) > 0 {
				ext = strings.TrimPrefix(exts[0], ".")
			}
			if c.MIMEType == "image/png" {
				ext = "png"
			}
			name := fmt.Sprintf("%s-%d.%s", req.Tool, len(out.Images)+1, ext)
			if max := b.m.cfg.MaxImage; max > 0 && int64(len(c.Data)) > max {
				text = append(text, fmt.Sprintf("[image %s of %d bytes left out: over execution.max_image_size (%d bytes)]", name, len(c.Data), max))
				continue
			}
			out.Images = append(out.Images, backend.Image{Name: name, MIMEType: c.MIMEType, Data: c.Data})
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				text = append(text, c.Resource.Text)
			} else if c.Resource != nil {
				text = append(text, fmt.Sprintf("[resource %s (%s), %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		case *mcp.ResourceLink:
			text = append(text, fmt.Sprintf("[resource link %s]", c.URI))
		case *mcp.AudioContent:
			text = append(text, fmt.Sprintf("[audio %s, %d bytes, not passed on]", c.MIMEType, len(c.Data)))
		}
	}
	joined := red.String(strings.Join(text, "\n"))
	if res.IsError {
		if joined == "" {
			joined = "the tool reported an error without a message"
		}
		return bridge.CallResult{IsError: true, Message: joined}
	}
	if res.StructuredContent != nil {
		if sb, err := json.Marshal(redactValue(red, res.StructuredContent)); err == nil {
			out.Structured = sb
		}
	}
	out.Text = joined
	if max := b.m.cfg.MaxOutput; max > 0 && int64(len(out.Text)+len(out.Structured)) > max {
		return bridge.CallResult{IsError: true, Message: fmt.Sprintf("the result of %s.%s is %d bytes, over execution.max_output (%d bytes): ask the tool for less",
			req.Server, req.Tool, len(out.Text)+len(out.Structured), max)}
	}
	return out
}

// redactValue redacts every key, string and number inside a decoded JSON
// value (a number that is a secret becomes the string "[redacted]").
func redactValue(red redactor, v any) any {
	switch v.(type) {
	case string, []any, map[string]any, float64, json.Number, nil, bool:
		return red.s.Value(v)
	}
	// A typed value: redact through its JSON form.
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var x any
	if json.Unmarshal(b, &x) != nil {
		return nil
	}
	return red.s.Value(x)
}

// toolsByID is every listed tool by "server.tool".
func (b *Bridge) toolsByID(ctx context.Context, ids []string) ([]bridge.Tool, error) {
	servers := map[string]bool{}
	for _, id := range ids {
		srv, _, ok := strings.Cut(id, ".")
		if !ok {
			return nil, fmt.Errorf("grant %q is not \"server.tool\"", id)
		}
		if b.m.servers[srv] == nil {
			return nil, fmt.Errorf("grant %q names server %q, which is not configured (servers: %s)", id, srv, strings.Join(b.m.cfg.Names, ", "))
		}
		servers[srv] = true
	}
	all := map[string]bridge.Tool{}
	for srv := range servers {
		cctx, cancel := context.WithTimeout(ctx, b.m.cfg.CallTimeout)
		tools, err := b.m.servers[srv].listTools(cctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("granted server %s is down: %w", srv, err)
		}
		for _, t := range tools {
			all[t.ID()] = t
		}
	}
	var out []bridge.Tool
	seen := map[string]bool{}
	for _, id := range ids {
		t, ok := all[id]
		if !ok {
			return nil, fmt.Errorf("grant %q: server %s lists no such tool", id, strings.SplitN(id, ".", 2)[0])
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out, nil
}

// Generate writes the Python package or the R code for the granted tools.
func (b *Bridge) Generate(ctx context.Context, req bridge.GenerateRequest) (map[string][]byte, error) {
	if req.Language != "python" && req.Language != "r" {
		return nil, fmt.Errorf("language %q is not supported: the bridge generates \"python\" and \"r\"", req.Language)
	}
	tools, err := b.toolsByID(ctx, req.Tools)
	if err != nil {
		return nil, err
	}
	if req.Language == "python" {
		return generatePython(tools)
	}
	return generateR(tools)
}

var _ bridge.Bridge = (*Bridge)(nil)
