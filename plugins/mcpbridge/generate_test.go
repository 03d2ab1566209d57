package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/bridge"
)

// The edge server's hostile tool (testdata/edgeserver, same text).
const (
	hostileName = "evil\"\"\"; import os; os.system('touch /tmp/forge-pwned') #`r system('x')`\n\u2028x"
	hostileText = "\"\"\"; import os; os.system('touch /tmp/forge-pwned')\n`r system('touch /tmp/forge-pwned')`\r\n#' @export\n\u2028\u0085)\nsystem('touch /tmp/forge-pwned')\n\\\"\\u0000 end \x00 \U0001F600 \\"
)

func python3(t testing.TB) string {
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not on the host: %v", err)
	}
	return p
}

// genBridge is a bridge on server-everything and the edge server, with
// every tool listed (their IDs) and the hostile tool's mapped name.
func genBridge(t *testing.T) (*Bridge, []bridge.Tool, string) {
	b := newTestBridge(t, map[string]ServerConfig{"everything": everythingConfig(t, nil), "edge": edgeConfig(nil)}, "20s")
	tools, err := b.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hostile := ""
	for _, tl := range tools {
		if tl.OriginalName == hostileName {
			hostile = tl.Name
		}
	}
	if hostile == "" {
		t.Fatalf("the hostile tool is not listed with its original name: %s", toolNames(tools))
	}
	return b, tools, hostile
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(p, "bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(full, c, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// astCheck holds every generated tool module to the one shape the generator
// writes; anything else (an import, a call, a statement smuggled in by a
// name, description or schema) fails it.
const astCheck = `
import ast, json, sys, pathlib
root = pathlib.Path(sys.argv[1]) / "forge_tools"
want = json.loads(sys.argv[2])  # {"server": {"tool": [params]}}
bad = []
def chk(cond, msg):
    if not cond: bad.append(msg)
def is_str(n): return isinstance(n, ast.Constant) and isinstance(n.value, str)
for server, tools in want.items():
    for tool, params in tools.items():
        f = root / server / (tool + ".py")
        tree = ast.parse(f.read_text(), str(f))
        b = tree.body
        chk(len(b) == 6, f"{f}: {len(b)} statements")
        chk(isinstance(b[0], ast.Expr) and is_str(b[0].value), f"{f}: no module docstring")
        chk(isinstance(b[1], ast.Import) and [(a.name, a.asname) for a in b[1].names] == [("typing", "_typing")], f"{f}: import 1")
        chk(isinstance(b[2], ast.ImportFrom) and b[2].module == "forge_tools" and [a.name for a in b[2].names] == ["_client"], f"{f}: import 2")
        chk(isinstance(b[3], ast.Assign) and b[3].targets[0].id == "_TOOL" and is_str(b[3].value) and b[3].value.value == server + "." + tool, f"{f}: _TOOL")
        s = b[4]
        chk(isinstance(s, ast.Assign) and s.targets[0].id == "_SCHEMA" and isinstance(s.value, ast.Call) and ast.unparse(s.value.func) == "_client.schema" and len(s.value.args) == 1 and is_str(s.value.args[0]), f"{f}: _SCHEMA")
        fn = b[5]
        chk(isinstance(fn, ast.FunctionDef) and fn.name == tool, f"{f}: function")
        chk([a.arg for a in fn.args.args] == params, f"{f}: params {[a.arg for a in fn.args.args]} != {params}")
        chk(not fn.decorator_list and not fn.args.vararg and not fn.args.kwarg and not fn.args.kwonlyargs, f"{f}: signature")
        for d in fn.args.defaults:
            chk(isinstance(d, ast.Constant) and d.value is None, f"{f}: a default other than None")
        chk(len(fn.body) == 2 and isinstance(fn.body[0], ast.Expr) and is_str(fn.body[0].value), f"{f}: docstring")
        r = fn.body[-1]
        chk(isinstance(r, ast.Return) and isinstance(r.value, ast.Call) and ast.unparse(r.value.func) == "_client.invoke", f"{f}: body")
        if isinstance(r, ast.Return) and isinstance(r.value, ast.Call) and len(r.value.args) == 3 and isinstance(r.value.args[2], ast.Dict):
            d = r.value.args[2]
            chk(all(is_str(k) for k in d.keys) and [v.id for v in d.values] == params, f"{f}: argument dict")
        else:
            bad.append(f"{f}: invoke arguments")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                chk(ast.unparse(node.func) in ("_client.schema", "_client.invoke"), f"{f}: call of {ast.unparse(node.func)}")
print("\n".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
`

// Every tool of server-everything and of the edge server (the hostile one
// included): the package compiles, and every tool module has exactly the
// generated shape.
func TestGeneratedPythonCompilesAndHasOneShape(t *testing.T) {
	b, tools, hostile := genBridge(t)
	var ids []string
	want := map[string]map[string][]string{}
	for _, tl := range tools {
		ids = append(ids, tl.ID())
		ps, err := params(tl.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.Ident)
		}
		if want[tl.Server] == nil {
			want[tl.Server] = map[string][]string{}
		}
		want[tl.Server][tl.Name] = append([]string{}, names...)
	}
	files, err := b.Generate(context.Background(), bridge.GenerateRequest{Language: "python", Tools: ids})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, files)
	py := python3(t)
	var paths []string
	for p := range files {
		paths = append(paths, filepath.Join(dir, p))
	}
	cmd := exec.Command(py, append([]string{"-m", "py_compile"}, paths...)...)
	cmd.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	if out, err := exec.Command(py, "-c", astCheck, filepath.Join(dir, "python"), string(mustJSON(t, want))).CombinedOutput(); err != nil {
		t.Fatalf("ast check: %v\n%s", err, out)
	}
	// Importing runs no third-party text: the hostile docstring comes back
	// intact, the signature is the schema's.
	script := fmt.Sprintf(`
import inspect, os, json
from forge_tools import edge, everything
f = getattr(edge, %q)
assert f.__doc__.startswith(json.loads(%q).replace("\x00", "\x00").strip()), repr(f.__doc__)
print(inspect.signature(everything.get_sum))
print(inspect.signature(everything.get_annotated_message))
print(inspect.signature(f))
assert not os.path.exists("/tmp/forge-pwned")
`, hostile, string(mustJSON(t, hostileText)))
	cmd = exec.Command(py, "-c", script)
	cmd.Env = []string{"PYTHONPATH=" + filepath.Join(dir, "python"), "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != "(a: float, b: float) -> Any" || lines[1] != "(messageType: str, includeImage: Optional[bool] = None) -> Any" ||
		!strings.HasPrefix(lines[2], "(class_: int, ") {
		t.Fatalf("signatures: %q", lines)
	}
}

// fakeCore serves the bridge protocol on a unix socket the way the core
// does, forwarding to a real Bridge, with a fixed policy for the client's
// error classes: edge.crash is denied, edge.pid's budget is spent,
// edge.hang times out.
type fakeCore struct {
	b        *Bridge
	ln       net.Listener
	requests atomic.Int64
	inflight atomic.Int64
	maxIn    atomic.Int64
	outDir   string
}

func startFakeCore(t *testing.T, b *Bridge, sock, outDir string) *fakeCore {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(sock, 0o777)
	fc := &fakeCore{b: b, ln: ln, outDir: outDir}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fc.serve(c)
		}
	}()
	return fc
}

func (fc *fakeCore) serve(c net.Conn) {
	defer c.Close()
	var wmu sync.Mutex
	send := func(r bridge.WireResponse) {
		b, _ := json.Marshal(r)
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = c.Write(append(b, '\n'))
	}
	rd := bufio.NewReaderSize(c, 1<<16)
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return
		}
		var req bridge.WireRequest
		if err := json.Unmarshal(line, &req); err != nil {
			send(bridge.WireResponse{Error: &bridge.WireError{Kind: bridge.WireErrorInvalid, Message: "not JSON"}})
			return
		}
		fc.requests.Add(1)
		go func() {
			n := fc.inflight.Add(1)
			defer fc.inflight.Add(-1)
			for m := fc.maxIn.Load(); n > m && !fc.maxIn.CompareAndSwap(m, n); m = fc.maxIn.Load() {
			}
			send(fc.answer(req))
		}()
	}
}

func (fc *fakeCore) answer(req bridge.WireRequest) bridge.WireResponse {
	fail := func(kind, msg string) bridge.WireResponse {
		return bridge.WireResponse{ID: req.ID, Error: &bridge.WireError{Kind: kind, Message: msg}}
	}
	switch req.Tool {
	case "edge.crash":
		return fail(bridge.WireErrorDenied, "edge.crash is denied by policy")
	case "edge.pid":
		return fail(bridge.WireErrorBudget, "the run's budget of 5 calls is spent")
	case "edge.hang":
		return fail(bridge.WireErrorTimeout, "edge.hang timed out after 1s")
	}
	server, tool, _ := strings.Cut(req.Tool, ".")
	args, _ := json.Marshal(req.Arguments)
	res, err := fc.b.CallTool(context.Background(), bridge.CallRequest{Server: server, Tool: tool, Arguments: args})
	if err != nil {
		return fail(bridge.WireErrorServer, err.Error())
	}
	if res.IsError {
		return fail(bridge.WireErrorTool, res.Message)
	}
	out := bridge.WireResponse{ID: req.ID}
	if res.Structured != nil {
		out.Result = json.RawMessage(res.Structured)
	} else {
		out.Result = res.Text
	}
	for i, im := range res.Images {
		p := filepath.Join(fc.outDir, fmt.Sprintf("tool-%d-%d-%s", req.ID, i+1, im.Name))
		_ = os.WriteFile(p, im.Data, 0o644)
		out.Images = append(out.Images, p)
	}
	return out
}

const pyEndToEnd = `
import threading, os, sys
import forge_tools
from forge_tools import everything, edge

def expect(exc, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc as e:
        return e
    raise AssertionError("no %s from %s" % (exc.__name__, fn.__name__))

assert "The sum of 20 and 22 is 42" in everything.get_sum(a=20, b=22), everything.get_sum(a=20, b=22)
r = everything.get_structured_content(location="Chicago")
assert isinstance(r, dict) and "temperature" in r, r

# checked before the call: the core sees no request
before = int(sys.argv[1]) if len(sys.argv) > 1 else 0
e = expect(forge_tools.ToolInvalid, everything.get_structured_content, location="Paris")
assert "must be one of" in str(e), e
e = expect(forge_tools.ToolInvalid, everything.get_sum, 1, None)
assert "'b' is required" in str(e), e
expect(TypeError, everything.get_sum, a=1)
e = expect(forge_tools.ToolInvalid, everything.echo, message="x" * (9 << 20))
assert "over the limit" in str(e)

# each kind of failure is its own class, with the message
e = expect(forge_tools.ToolError, edge.fail_env, name="NOPE")
assert str(e) == "failed with ", repr(str(e))
assert e.tool == "edge.fail_env"
assert "denied by policy" in str(expect(forge_tools.ToolDenied, edge.crash))
expect(forge_tools.ToolBudgetExceeded, edge.pid)
expect(forge_tools.ToolTimeout, edge.hang)
assert issubclass(forge_tools.ToolTimeout, forge_tools.BridgeError)

# images: the result and the paths of the written files
res, images = forge_tools.call_with_images("everything.get_tiny_image", {})
assert len(images) == 1 and open(images[0], "rb").read(4) == b"\x89PNG", images

# an answer over the size limit ends the connection with an error; the next call reconnects
e = expect(forge_tools.BridgeError, edge.big, n=9 << 20)
assert "over" in str(e), e
assert edge.get_user() == "get_user"

# 50 calls in a loop
for i in range(50):
    assert everything.echo(message="loop %d" % i) == "Echo: loop %d" % i

# many in flight on one connection, from threads
errors = []
def worker(i):
    try:
        everything.trigger_long_running_operation(duration=0.4, steps=1)
        assert everything.echo(message="t%d" % i) == "Echo: t%d" % i
    except Exception as e:
        errors.append(e)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
assert not errors, errors
print("OK")
`

// The generated Python client against a core-like socket server that
// forwards to the real bridge: results, the exception classes, checks
// before the call, the size limit, images, 50 calls, calls in flight.
func TestGeneratedPythonEndToEnd(t *testing.T) {
	b, _, _ := genBridge(t)
	grant := []string{"everything.get_sum", "everything.get_structured_content", "everything.echo", "everything.trigger_long_running_operation",
		"edge.fail_env", "edge.crash", "edge.pid", "edge.hang", "edge.big", "edge.get_user"}
	files, err := b.Generate(context.Background(), bridge.GenerateRequest{Language: "python", Tools: grant})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, files)
	fc := startFakeCore(t, b, filepath.Join(dir, bridge.SocketName), t.TempDir())
	cmd := exec.Command(python3(t), "-c", pyEndToEnd)
	cmd.Env = []string{"PYTHONPATH=" + filepath.Join(dir, "python"), bridge.EnvSocket + "=" + filepath.Join(dir, bridge.SocketName), "PYTHONDONTWRITEBYTECODE=1"}
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the Python client hung:\n%s", out)
	}
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Fatalf("%v\n%s", err, out)
	}
	// 2 results + 4 failures + 1 image + 1 oversize + 1 + 50 + 16; none of
	// the 4 calls refused by the argument checks reaches the core.
	if got := fc.requests.Load(); got != 75 {
		t.Errorf("the core saw %d requests, want 75 (argument checks must not reach it)", got)
	}
	if fc.maxIn.Load() < 2 {
		t.Errorf("at most %d call in flight on the connection; want several", fc.maxIn.Load())
	}
}
