package toolbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// MaxGenerated caps the bytes of generated code one grant holds.
const MaxGenerated = 16 << 20

// MaxConns caps the connections one sandbox holds open to its socket.
const MaxConns = 16

// Grant is the tools one run or session may call, and the socket through
// which its sandbox calls them. Its directory is mounted read-only at
// bridge.SandboxDir in the sandbox; Close removes it. Its run, life,
// connections and audit lines are a grant.Grant's.
type Grant struct {
	*grant.Grant
	s        *Service
	token    string
	plugin   string
	language string
	dir      string
	ln       net.Listener
	ctx      context.Context // ends with the grant: in-flight calls stop
	cancel   context.CancelFunc
	sem      chan struct{} // calls in flight
	wg       sync.WaitGroup

	mu       sync.Mutex
	tools    map[string]bool
	calls    int            // of the current run
	byServer map[string]int // of the current run, per server
	total    int
	outHost  string // the sandbox's output directory on the host ("": none)
	outCtr   string // and in the container
	seq      int
	genBytes int
	remote   Remote // the sandbox keeps its own copies (a pod), or nil
}

// Remote is a sandbox that does not see the grant's directory or its
// output directory on this host but has copies of its own (a pod of the
// Kubernetes runtime): the grant brings its copy up to date after each
// change and writes the images of tool results into it.
type Remote interface {
	Sync(ctx context.Context) error
	WriteOutput(ctx context.Context, name string, data []byte) error
}

// SetRemote tells the grant its sandbox is r (nil: on this host).
func (g *Grant) SetRemote(r Remote) {
	g.mu.Lock()
	g.remote = r
	g.mu.Unlock()
}

// Token is the opaque id the backend copies into its container's intent.
func (g *Grant) Token() string { return g.token }

// Dir is the grant directory on the host.
func (g *Grant) Dir() string { return g.dir }

// Tools lists the granted tool ids.
func (g *Grant) Tools() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.tools))
}

// Env returns env with the variables generated code needs added:
// FORGE_TOOLS_SOCKET, PYTHONPATH (the package first) and R_PROFILE_USER.
func (g *Grant) Env(env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out[bridge.EnvSocket] = bridge.SandboxDir + "/" + bridge.SocketName
	if p := out["PYTHONPATH"]; p != "" {
		out["PYTHONPATH"] = bridge.PythonDir + ":" + p
	} else {
		out["PYTHONPATH"] = bridge.PythonDir
	}
	out["R_PROFILE_USER"] = bridge.RProfile
	return out
}

// Attach tells the grant where its sandbox's output directory is, on the
// host and in the container: image content of tool results goes there.
func (g *Grant) Attach(hostDir, containerDir string) {
	g.mu.Lock()
	g.outHost, g.outCtr = hostDir, containerDir
	g.mu.Unlock()
}

// BeginRun starts a new run on the grant (a session's next execute): a
// fresh call budget, and approval goes to the client of this run.
func (g *Grant) BeginRun(runID, client string, approve Approver) {
	g.mu.Lock()
	g.calls, g.byServer = 0, nil
	g.mu.Unlock()
	g.Grant.BeginRun(grant.Run{ID: runID, Client: client, Approve: approve})
}

// Extend adds tools to the grant and regenerates the wrapper code for all
// of them (a session's later execute may ask for more).
func (g *Grant) Extend(ctx context.Context, tools []string) error {
	if err := g.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	added := false
	for _, t := range tools {
		if !g.tools[t] {
			g.tools[t] = true
			added = true
		}
	}
	all := slices.Sorted(maps.Keys(g.tools))
	fresh := g.genBytes == 0
	g.mu.Unlock()
	if !added && !fresh {
		return nil
	}
	files := map[string][]byte{}
	if len(all) > 0 {
		b, err := g.s.get(ctx)
		if err != nil {
			return fmt.Errorf("the bridge plugin %s is unavailable: %w", g.s.plugin, err)
		}
		if files, err = b.Generate(ctx, bridge.GenerateRequest{Language: g.language, Tools: all}); err != nil {
			// Scrubbed, so not wrapped: the message reaches the client.
			return fmt.Errorf("the bridge plugin %s could not generate %s code for %s: %s", g.s.plugin, g.language, strings.Join(all, ", "), g.s.scrub.String(err.Error()))
		}
	}
	if _, ok := files["r/profile.R"]; !ok {
		// R_PROFILE_USER always names a file; it loads the wrappers when
		// there are any.
		files["r/profile.R"] = []byte("local({ f <- \"" + bridge.SandboxDir + "/r/forge_tools.R\"; if (file.exists(f)) source(f) })\n")
	}
	// The language directories exist from the start: Python caches a
	// missing sys.path entry as absent for good, so a session granted tools
	// later would never find them.
	for _, d := range []string{"python", "r", "bin"} {
		if err := os.MkdirAll(filepath.Join(g.dir, d), 0o755); err != nil {
			return fmt.Errorf("create the tool grant directory: %w", err)
		}
	}
	n, err := g.write(files)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.genBytes = n + 1
	r := g.remote
	g.mu.Unlock()
	if r != nil {
		if err := r.Sync(ctx); err != nil {
			return fmt.Errorf("copy the tools' code into the sandbox: %w", err)
		}
	}
	g.Record(EventGrant, true, "", map[string]any{"action": "extend", "tools": all, "plugin": g.plugin, "bridge": g.s.plugin, "language": g.language})
	return nil
}

// write puts generated files into the grant directory, each atomically (a
// running sandbox may be reading them): paths must be relative and stay
// inside; files under bin/ are executable.
func (g *Grant) write(files map[string][]byte) (int, error) {
	total := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		clean := path.Clean(name)
		if name == "" || path.IsAbs(name) || clean != name || strings.HasPrefix(clean, "../") || clean == ".." || clean == bridge.SocketName || strings.HasPrefix(path.Base(clean), ".") {
			return 0, fmt.Errorf("the bridge plugin %s generated a file named %q: names must be clean relative paths inside the tools directory", g.s.plugin, name)
		}
		total += len(files[name])
		if total > MaxGenerated {
			return 0, fmt.Errorf("the bridge plugin %s generated more than %d bytes of code", g.s.plugin, MaxGenerated)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(clean, "bin/") {
			mode = 0o755
		}
		dst := filepath.Join(g.dir, filepath.FromSlash(clean))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, fmt.Errorf("write generated code: %w", err)
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".gen-*")
		if err != nil {
			return 0, fmt.Errorf("write generated code: %w", err)
		}
		_, err = tmp.Write(files[name])
		if err == nil {
			err = tmp.Chmod(mode)
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), dst)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return 0, fmt.Errorf("write generated code %s: %w", clean, err)
		}
	}
	return total, nil
}

// listen opens the grant's socket. The directory is bind-mounted (never
// the socket alone: a re-created socket would not be seen) and the socket
// made connectable by the container's user.
func (g *Grant) listen() error {
	p := filepath.Join(g.dir, bridge.SocketName)
	ln, err := net.Listen("unix", p)
	if err != nil {
		return fmt.Errorf("listen on the tool grant socket: %w", err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("tool grant socket: %w", err)
	}
	g.ln = ln
	g.wg.Add(1)
	go g.accept()
	return nil
}

func (g *Grant) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		t, err := g.Track(c)
		switch {
		case errors.Is(err, grant.ErrTooMany):
			// Each connection may buffer a line of MaxWireMessage bytes:
			// a sandbox must not make the core hold unbounded memory
			// (Track refuses past MaxConns).
			b, _ := json.Marshal(bridge.WireResponse{Error: &bridge.WireError{Kind: bridge.WireErrorInvalid,
				Message: fmt.Sprintf("too many connections: at most %d per sandbox; send many requests over one", MaxConns)}})
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(append(b, '\n'))
			c.Close()
			continue
		case err != nil: // ended
			c.Close()
			return
		}
		g.wg.Add(1)
		go g.serve(t)
	}
}

// Close ends the grant: the socket stops, calls in flight are cancelled,
// and the directory is removed. It is safe to call more than once.
func (g *Grant) Close() {
	g.mu.Lock()
	total := g.total
	g.mu.Unlock()
	if !g.End(ruleClosed) { // connections cut
		return
	}
	g.cancel()
	if g.ln != nil {
		g.ln.Close()
	}
	g.wg.Wait()
	err := workspace.RemoveAll(g.dir) // rootless: the U mount option gave it to a sub-id
	if err != nil {
		g.s.log.Warn("could not remove a tool grant directory", "dir", g.dir, "error", err)
	}
	g.s.forget(g)
	g.Record(EventGrant, err == nil, audit.ErrText(err), map[string]any{"action": "end", "plugin": g.plugin, "bridge": g.s.plugin, "calls": total})
}

var errTooLong = errors.New("line too long")

// readLine reads one line of at most max bytes (without the newline).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, errTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case len(line) > 0 && errors.Is(err, os.ErrDeadlineExceeded):
			return nil, err
		default:
			return line, err
		}
	}
}

// wireRequest is bridge.WireRequest with the arguments kept raw, so that
// numbers reach the tool as the sandbox wrote them.
type wireRequest struct {
	ID        int64           `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// serve answers one connection: requests are read in order and handled
// concurrently (up to bridge.max_concurrent_calls for the grant), answers
// written as they come. A line that is not a request, or too long, ends
// the connection after an error with id 0.
func (g *Grant) serve(c *grant.Conn) {
	defer g.wg.Done()
	var wmu sync.Mutex
	send := func(r bridge.WireResponse) {
		b, err := json.Marshal(r)
		if err == nil && len(b) > bridge.MaxWireMessage {
			b, err = json.Marshal(bridge.WireResponse{ID: r.ID, Error: &bridge.WireError{Kind: bridge.WireErrorServer,
				Message: fmt.Sprintf("the tool's result is %d bytes as JSON, over the %d-byte message limit", len(b), bridge.MaxWireMessage)}})
		}
		if err != nil {
			return
		}
		wmu.Lock()
		defer wmu.Unlock()
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		c.Write(append(b, '\n'))
	}
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		c.Close()
		g.Untrack(c)
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := readLine(br, bridge.MaxWireMessage)
		if errors.Is(err, errTooLong) {
			g.audit(wireRequest{}, "", "", time.Now(), bridge.WireErrorInvalid, RuleInvalid, "a request line was over the message limit")
			send(bridge.WireResponse{Error: &bridge.WireError{Kind: bridge.WireErrorInvalid, Message: fmt.Sprintf("a request line is over %d bytes (bridge.MaxWireMessage); the connection is closed", bridge.MaxWireMessage)}})
			return
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var req wireRequest
			if jerr := json.Unmarshal(line, &req); jerr != nil || req.Tool == "" {
				msg := "a request must be a JSON object {\"id\": N, \"tool\": \"server.tool\", \"arguments\": {...}} on one line"
				if jerr != nil {
					msg += ": " + jerr.Error()
				}
				g.audit(wireRequest{}, "", "", time.Now(), bridge.WireErrorInvalid, RuleInvalid, "a request was not valid JSON")
				send(bridge.WireResponse{Error: &bridge.WireError{Kind: bridge.WireErrorInvalid, Message: msg + "; the connection is closed"}})
				return
			}
			select {
			case g.sem <- struct{}{}:
			case <-g.ctx.Done():
				return
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				defer func() { <-g.sem }()
				send(g.handle(req))
			}()
		}
		if err != nil {
			return
		}
	}
}

// handle admits one call (grant, policy, budget, approval), forwards it to
// the bridge under the per-call timeout and audits it.
func (g *Grant) handle(req wireRequest) bridge.WireResponse {
	start := time.Now()
	fail := func(kind, rule, msg string) bridge.WireResponse {
		server, tool, _ := strings.Cut(req.Tool, ".")
		g.audit(req, server, tool, start, kind, rule, msg)
		return bridge.WireResponse{ID: req.ID, Error: &bridge.WireError{Kind: kind, Message: msg}}
	}
	server, tool, _ := strings.Cut(req.Tool, ".")
	g.mu.Lock()
	granted := g.tools[req.Tool]
	g.mu.Unlock()
	_, configured := g.s.servers[server]
	if !granted {
		// A tool the policy denies is never granted: telling the user to
		// name it in mcp_tools would send them to a refusal. Say which
		// policy key denies it instead.
		if configured && tool != "" && g.s.Decide(server, tool) == Deny {
			return fail(bridge.WireErrorDenied, RuleDenied, g.s.denied(server, tool, list(g.Tools())))
		}
		if !configured {
			return fail(bridge.WireErrorDenied, RuleNotGranted, fmt.Sprintf("tool %s was not granted to this run: no MCP server %s is configured (configured: %s; granted: %s)",
				quotedTool(req.Tool), quotedTool(server), list(g.s.Servers()), list(g.Tools())))
		}
		return fail(bridge.WireErrorDenied, RuleNotGranted, fmt.Sprintf("tool %s was not granted to this run (granted: %s); name it in mcp_tools of the execute call", quotedTool(req.Tool), list(g.Tools())))
	}
	if len(req.Arguments) > 0 && !bytes.Equal(req.Arguments, []byte("null")) {
		var obj map[string]json.RawMessage
		if json.Unmarshal(req.Arguments, &obj) != nil {
			return fail(bridge.WireErrorInvalid, RuleInvalid, fmt.Sprintf("arguments of %s must be a JSON object", req.Tool))
		}
	} else {
		req.Arguments = json.RawMessage("{}")
	}
	decision := g.s.Decide(server, tool)
	if decision == Deny {
		return fail(bridge.WireErrorDenied, RuleDenied, g.s.denied(server, tool, list(g.Tools())))
	}
	g.mu.Lock()
	max := g.s.bcfg.MaxCallsPerRun
	if g.calls >= max {
		g.mu.Unlock()
		return fail(bridge.WireErrorBudget, RuleBudget, fmt.Sprintf("this run has made its %d tool calls (bridge.max_calls_per_run); %s was not called", max, req.Tool))
	}
	if smax := g.s.servers[server].MaxCallsPerRun; smax > 0 && g.byServer[server] >= smax {
		g.mu.Unlock()
		return fail(bridge.WireErrorBudget, RuleBudget, fmt.Sprintf("this run has made its %d calls of %s tools (mcp_tools.%s.max_calls_per_run); %s was not called", smax, server, server, req.Tool))
	}
	if g.byServer == nil {
		g.byServer = map[string]int{}
	}
	g.byServer[server]++
	g.calls++
	g.total++
	g.mu.Unlock()
	if decision == Approve {
		err := g.Approve(g.ctx, grant.Question{Rule: RuleApproval,
			Text:      fmt.Sprintf("Sandboxed code asks to call the MCP tool %s with arguments:\n%s\nAllow this call?", req.Tool, preview(req.Arguments)),
			Nobody:    fmt.Sprintf("tool %s needs the user's approval (mcp_tools.%s approve), and no MCP client of this run can be asked", req.Tool, server),
			Failed:    fmt.Sprintf("tool %s needs the user's approval, and asking failed", req.Tool),
			CannotAsk: fmt.Sprintf("tool %s needs the user's approval (mcp_tools.%s approve), and the MCP client cannot be asked (it declared no form elicitation, or speaks protocol 2026-07-28, where a server cannot ask during a call), so it was not called", req.Tool, server),
			Declined:  fmt.Sprintf("the user declined the call of %s", req.Tool)})
		if err != nil {
			return fail(bridge.WireErrorDenied, RuleApproval, err.Error())
		}
	}
	timeout := g.s.timeout(server)
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	var res bridge.CallResult
	callStart := time.Now()
	b, err := g.s.get(ctx)
	if err == nil {
		res, err = b.CallTool(ctx, bridge.CallRequest{Server: server, Tool: tool, Arguments: req.Arguments, Timeout: timeout})
	}
	// The plugin gets the timeout too and may give up a moment before our
	// own deadline: a failure at the deadline is a timeout either way.
	late := err != nil && time.Since(callStart) >= timeout-250*time.Millisecond
	switch {
	case g.ctx.Err() == nil && (ctx.Err() != nil || late || errors.Is(err, context.DeadlineExceeded)):
		return fail(bridge.WireErrorTimeout, "", fmt.Sprintf("tool %s did not answer within %s (mcp_tools.%s.call_timeout, else bridge.call_timeout)", req.Tool, timeout, server))
	case g.ctx.Err() != nil:
		return fail(bridge.WireErrorServer, "", fmt.Sprintf("tool %s was cancelled: the run ended", req.Tool))
	case err != nil:
		return fail(bridge.WireErrorServer, "", fmt.Sprintf("the bridge could not call %s: %s", req.Tool, g.s.scrub.String(err.Error())))
	case res.IsError:
		msg := res.Message
		if msg == "" {
			msg = res.Text
		}
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		// The tool's message is its result: the sandbox sees it, the
		// audit log does not.
		g.audit(req, server, tool, start, bridge.WireErrorTool, "", "the tool reported an error")
		return bridge.WireResponse{ID: req.ID, Error: &bridge.WireError{Kind: bridge.WireErrorTool, Message: g.s.scrub.String(msg)}}
	}
	out := bridge.WireResponse{ID: req.ID}
	if clean := g.s.scrub.JSON(res.Structured); len(res.Structured) > 0 && json.Valid(clean) {
		out.Result = json.RawMessage(clean)
	} else if len(res.Structured) > 0 {
		// Not JSON from the bridge: the scrubbed text as a string, never
		// the bytes unscrubbed.
		out.Result = string(clean)
	} else {
		out.Result = g.s.scrub.String(res.Text)
	}
	out.Images = g.saveImages(req.ID, res.Images)
	g.audit(req, server, tool, start, "ok", "", "")
	return out
}

func quotedTool(s string) string {
	if len(s) > 100 {
		return fmt.Sprintf("%q…", s[:100])
	}
	return fmt.Sprintf("%q", s)
}

// preview shows arguments to the user who approves, cut to a readable size.
func preview(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Reset()
		buf.Write(raw)
	}
	s := buf.String()
	if len(s) > 2000 {
		s = s[:2000] + fmt.Sprintf("\n… (%d bytes in all)", len(raw))
	}
	return s
}

var imageExt = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp", "image/svg+xml": ".svg"}

// saveImages writes a result's images into the sandbox's output directory
// and returns their paths in the container. Nothing there is followed: a
// name the sandbox planted makes the next one be tried.
func (g *Grant) saveImages(id int64, imgs []backend.Image) []string {
	if len(imgs) == 0 {
		return nil
	}
	g.mu.Lock()
	dir, ctr, r := g.outHost, g.outCtr, g.remote
	g.mu.Unlock()
	if dir == "" {
		g.s.log.Warn("a tool returned images but the sandbox has no output directory; they were dropped", "count", len(imgs))
		return nil
	}
	if r != nil {
		return g.sendImages(r, id, ctr, imgs)
	}
	var uid, gid = -1, -1
	if st, err := os.Stat(dir); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(sys.Uid), int(sys.Gid)
		}
	}
	var out []string
	for _, img := range imgs {
		for try := 0; try < 5; try++ {
			name := g.imageName(id, img.MIMEType)
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
			if errors.Is(err, os.ErrExist) {
				continue
			}
			if err != nil {
				g.s.log.Warn("could not save a tool's image", "error", err)
				break
			}
			_, err = f.Write(img.Data)
			if uid >= 0 {
				f.Chown(uid, gid) // the sandbox's user may remove it
			}
			f.Close()
			if err == nil {
				out = append(out, ctr+"/"+name)
			}
			break
		}
	}
	return out
}

// imageName is the next name for an image of call id's result.
func (g *Grant) imageName(id int64, mime string) string {
	ext := imageExt[mime]
	if ext == "" {
		ext = ".bin"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	return fmt.Sprintf("tool-%d-%d%s", id, g.seq, ext)
}

// sendImages writes a result's images into a remote sandbox's output
// directory (the runtime refuses a link there, and the names are this
// grant's own sequence).
func (g *Grant) sendImages(r Remote, id int64, ctr string, imgs []backend.Image) []string {
	ctx, cancel := context.WithTimeout(g.ctx, 30*time.Second)
	defer cancel()
	var out []string
	for _, img := range imgs {
		name := g.imageName(id, img.MIMEType)
		if err := r.WriteOutput(ctx, name, img.Data); err != nil {
			g.s.log.Warn("could not save a tool's image in the sandbox", "error", err)
			continue
		}
		out = append(out, ctr+"/"+name)
	}
	return out
}

// audit records one call: server, tool, duration and outcome, never its
// arguments or result.
func (g *Grant) audit(req wireRequest, server, tool string, start time.Time, outcome, rule, msg string) {
	d := map[string]any{"server": server, "tool": tool, "duration_ms": time.Since(start).Milliseconds(), "outcome": outcome,
		"plugin": g.plugin, "bridge": g.s.plugin, "request_id": req.ID}
	if len(server)+len(tool) > 200 {
		d["server"], d["tool"] = "(too long)", ""
	}
	if rule != "" {
		d["rule"] = rule
	}
	g.Record(EventCall, outcome == "ok", msg, d)
}
