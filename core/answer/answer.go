// Package answer keeps every MCP message the server sends under one bound,
// server.max_message, counted on the encoded JSON. The common clients
// refuse larger messages: the TypeScript SDK's stdio transport drops the
// connection on one over 10 MiB, and a stdio server whose client left
// exits. The tools bound what they produce (output cut by its escaped
// size, files served in parts); the guard here is the last line, for what
// they could not know: several inline files and images in one answer, a
// resource that grew.
package answer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sort"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/toolcall"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
)

// Envelope is what a message adds around a result or params: the JSON-RPC
// fields, a request id, an HTTP event stream's framing.
const Envelope = 4 << 10

// ProgressText bounds one progress notification's message: the run's
// output travels with the result; progress shows it as it comes.
const ProgressText = 64 << 10

// Size is v's length as the wire encodes it: go-sdk's encoder, without HTML
// escaping at the top (its content types escape their own text).
func Size(v any) (int, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 0, err
	}
	return buf.Len() - 1, nil // Encode's newline
}

// Guard bounds the server's answers and notifications.
type Guard struct {
	Limit int // server.max_message
	Log   hclog.Logger
}

func (g Guard) budget() int { return g.Limit - Envelope }

// Receiving is a receiving middleware: a tool result over the bound is
// fitted (Fit), any other answer over it is refused with what to do, and a
// handler that panics is answered with an error (logged) instead of taking
// the server, and every client's connection, down with it.
func (g Guard) Receiving(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := g.call(ctx, next, method, req)
		if err != nil || res == nil || g.Limit <= 0 {
			return res, err
		}
		n, err := Size(res)
		if err != nil || n <= g.budget() {
			return res, nil // an encoding error is the transport's to report
		}
		if tr, ok := res.(*mcp.CallToolResult); ok {
			notes := Fit(tr, g.budget())
			g.Log.Warn("answer over server.max_message fitted", "method", method, "bytes", n, "limit", g.Limit, "cut", notes)
			return tr, nil
		}
		g.Log.Warn("answer over server.max_message refused", "method", method, "bytes", n, "limit", g.Limit)
		return nil, fmt.Errorf("the answer to %s would be %s, over the %s one message may hold (server.max_message; MCP clients refuse larger messages): "+
			"ask for less at once", method, human(n), human(g.Limit))
	}
}

func (g Guard) call(ctx context.Context, next mcp.MethodHandler, method string, req mcp.Request) (res mcp.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			g.Log.Error("a request's handler panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("MCP-Forge failed answering %s: an internal error (logged); nothing was changed by the failure itself, try again or report it", method)
		}
	}()
	return next(ctx, method, req)
}

// Sending is a sending middleware: a progress message is cut to
// ProgressText; any other notification over the bound is dropped (logged),
// never sent to break the connection.
func (g Guard) Sending(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p, ok := req.GetParams().(*mcp.ProgressNotificationParams); ok && sanitize.JSONLen(p.Message) > ProgressText {
			p.Message = sanitize.CutJSON(p.Message, ProgressText-64) + " [cut: the result has all of it]"
		}
		if g.Limit > 0 {
			if n, err := Size(req.GetParams()); err == nil && n > g.budget() {
				g.Log.Error("notification over server.max_message dropped", "method", method, "bytes", n, "limit", g.Limit)
				return nil, fmt.Errorf("%s of %s not sent: over server.max_message (%s)", method, human(n), human(g.Limit))
			}
		}
		return next(ctx, method, req)
	}
}

// Fit makes a tool result at most budget bytes once encoded, giving up the
// least first, and says what it gave up (also in the result's first text,
// so the agent reads it):
//  1. embedded resources become links to the same resource (read apart);
//  2. images are left out, the largest first;
//  3. the longest texts are cut at the end;
//  4. if the structured content alone is too large, the result becomes an
//     error saying so.
func Fit(res *mcp.CallToolResult, budget int) []string {
	var notes []string
	size := func() int { n, _ := Size(res); return n }
	n := size()
	for i, c := range res.Content {
		if n <= budget {
			break
		}
		er, ok := c.(*mcp.EmbeddedResource)
		if !ok || er.Resource == nil || er.Resource.URI == "" {
			continue
		}
		r := er.Resource
		l := &mcp.ResourceLink{URI: r.URI, Name: r.URI, MIMEType: r.MIMEType}
		res.Content[i] = l
		notes = append(notes, fmt.Sprintf("%s sent as a link: read it with resources/read", r.URI))
		n = size()
	}
	if n > budget {
		type img struct{ i, n int }
		var imgs []img
		for i, c := range res.Content {
			if im, ok := c.(*mcp.ImageContent); ok {
				imgs = append(imgs, img{i, len(im.Data)})
			}
		}
		sort.Slice(imgs, func(a, b int) bool { return imgs[a].n > imgs[b].n })
		drop := map[int]bool{}
		for _, im := range imgs {
			if n <= budget {
				break
			}
			drop[im.i] = true
			notes = append(notes, fmt.Sprintf("an image of %s left out", human(im.n)))
			n -= 4*im.n/3 + 64
		}
		kept := res.Content[:0]
		for i, c := range res.Content {
			if !drop[i] {
				kept = append(kept, c)
			}
		}
		res.Content = kept
		n = size()
	}
	if len(notes) > 0 {
		note := fmt.Sprintf("\nnote: this answer was over server.max_message (%s), so: ", human(budget+Envelope))
		for i, s := range notes {
			if i > 0 {
				note += "; "
			}
			note += s
		}
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				t.Text += note + "\n"
				break
			}
		}
		n = size()
	}
	const marker = 200 // the cut's own note
	for n > budget {
		var longest *mcp.TextContent
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok && (longest == nil || len(t.Text) > len(longest.Text)) {
				longest = t
			}
		}
		excess := n - budget + marker
		if longest == nil || sanitize.JSONLen(longest.Text) <= excess {
			break
		}
		before := len(longest.Text)
		longest.Text = sanitize.CutJSON(longest.Text, sanitize.JSONLen(longest.Text)-excess)
		cut := before - len(longest.Text)
		longest.Text += fmt.Sprintf("\n[cut here: %d bytes of this text left out to keep the answer under server.max_message]\n", cut)
		notes = append(notes, fmt.Sprintf("text cut by %d bytes", cut))
		n = size()
	}
	if n > budget {
		msg := fmt.Sprintf("The answer would be %s, over the %s one message may hold (server.max_message; MCP clients refuse larger messages), and could not be cut further. Ask for less at once.",
			human(n), human(budget+Envelope))
		*res = *toolcall.Error(msg)
		return append(notes, "answer replaced by an error")
	}
	return notes
}

func human(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
