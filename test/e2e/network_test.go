package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// networkServers are the local servers a granted run reaches: plain HTTP
// (a file, a redirect to a host that is not granted) and HTTPS with the
// test's own CA, both on 127.0.0.1 and reached by names that network.hosts
// maps there.
type networkServers struct {
	plain, tls    *httptest.Server
	port, tlsPort string
	caPEM         string
	notModified   atomic.Int32 // /versioned answered 304
}

func newNetworkServers(t *testing.T) *networkServers {
	t.Helper()
	var s networkServers
	mux := http.NewServeMux()
	mux.HandleFunc("/data", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from files.test") })
	mux.HandleFunc("/versioned", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			s.notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, "versioned file")
	})
	mux.HandleFunc("/simple/forgetest/", func(w http.ResponseWriter, r *http.Request) {
		sum := sha256.Sum256(testWheel)
		fmt.Fprintf(w, "<html><body><a href=\"/files/forgetest-0.1-py3-none-any.whl#sha256=%x\">forgetest-0.1-py3-none-any.whl</a></body></html>", sum)
	})
	mux.HandleFunc("/files/forgetest-0.1-py3-none-any.whl", func(w http.ResponseWriter, r *http.Request) { w.Write(testWheel) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://other.test:"+s.port+"/data", http.StatusFound)
	})
	s.plain = httptest.NewServer(mux)
	t.Cleanup(s.plain.Close)
	s.tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello over tls") }))
	t.Cleanup(s.tls.Close)
	_, s.port, _ = net.SplitHostPort(s.plain.Listener.Addr().String())
	_, s.tlsPort, _ = net.SplitHostPort(s.tls.Listener.Addr().String())
	s.caPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.tls.Certificate().Raw}))
	return &s
}

// testWheel is a pure-Python wheel of package forgetest 0.1, served by a
// local package index.
var testWheel = func() []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, body := range map[string]string{
		"forgetest/__init__.py":            "VALUE = 42\n",
		"forgetest-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: forgetest\nVersion: 0.1\n",
		"forgetest-0.1.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: mcp-forge-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"forgetest-0.1.dist-info/RECORD":   "",
	} {
		w, _ := z.Create(name)
		io.WriteString(w, body)
	}
	z.Close()
	return b.Bytes()
}()

// configure allows files.test and secure.test on the servers' ports (and
// other.test on none), maps names to 127.0.0.1 or a private address, and
// lets the proxy reach 127.0.0.1, which it refuses otherwise.
func (s *networkServers) configure(c *config.Config) {
	c.Network.AllowedHosts = []string{"files.test:" + s.port, "secure.test:" + s.tlsPort, "private.test:" + s.port}
	c.Network.AllowedCIDRs = []string{"127.0.0.1/32"}
	c.Network.Hosts = map[string]string{"files.test": "127.0.0.1", "secure.test": "127.0.0.1", "other.test": "127.0.0.1", "private.test": "10.255.255.1"}
}

// networkCore is a core configured for the local servers, edit applied
// after, and a client of it.
func networkCore(t *testing.T, edit func(*config.Config)) (*networkServers, *testenv.InProcess, *mcp.ClientSession) {
	t.Helper()
	s := newNetworkServers(t)
	p := testenv.NewInProcess(t, func(c *config.Config) {
		s.configure(c)
		if edit != nil {
			edit(c)
		}
	})
	return s, p, p.Connect(t)
}

// A granted run reaches the granted names from ordinary Python code
// (urllib over HTTP_PROXY and HTTPS_PROXY, TLS through CONNECT untouched);
// everything else is refused with its rule or has no route, and each
// connection is audited. A run without network has none, and a run asking
// for what the policy does not allow is refused before it starts.
func TestNetworkByHostName(t *testing.T) {
	s, p, cs := networkCore(t, nil)
	code := fmt.Sprintf(`import json, os, socket, ssl, urllib.request, urllib.error, http.client
P, T = %q, %q
out = {}
def get(url, **kw):
    try:
        with urllib.request.urlopen(url, timeout=20, **kw) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return 'HTTP %%d %%s' %% (e.code, e.headers.get('X-Mcp-Forge-Rule'))
    except Exception as e:
        return 'error ' + type(e).__name__
out['granted'] = get('http://files.test:%%s/data' %% P)
ctx = ssl.create_default_context(cafile='ca.pem'); ctx.check_hostname = False
out['tls'] = get('https://secure.test:%%s/' %% T, context=ctx)
out['ungranted'] = get('http://other.test:%%s/data' %% P)
out['ip_literal'] = get('http://127.0.0.1:%%s/data' %% P)
out['private'] = get('http://private.test:%%s/data' %% P)
out['redirect'] = get('http://files.test:%%s/redirect' %% P)
c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=20)
c.set_tunnel('files.test', 1)
try:
    c.connect(); out['connect_port'] = 'connected'
except OSError as e:
    out['connect_port'] = str(e)
def raw(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close(); return 'connected'
    except OSError as e:
        return 'error ' + type(e).__name__
out['raw_host'] = raw('127.0.0.1', int(P))
out['raw_out'] = raw('1.1.1.1', 80)
try:
    socket.getaddrinfo('files.test', 80); out['dns'] = 'resolved'
except OSError as e:
    out['dns'] = 'error ' + type(e).__name__
out['env'] = os.environ.get('FORGE_NETWORK')
print(json.dumps(out))`, s.port, s.tlsPort)
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code, "network": []string{"files.test", "secure.test", "private.test"},
		"input_files": []map[string]any{{"path": "ca.pem", "content": s.caPEM}}}, &o)
	if res.IsError || !o.Success {
		t.Fatalf("run with network: %s %+v", testenv.Text(res), o)
	}
	for k, want := range map[string]string{
		`"granted": "hello from files.test"`:                                                     "a granted name over plain HTTP",
		`"tls": "hello over tls"`:                                                                "a granted name over HTTPS (CONNECT)",
		`"ungranted": "HTTP 403 ` + egress.RuleHost:                                              "a name not granted",
		`"ip_literal": "HTTP 403 ` + egress.RuleIPLiteral:                                        "an IP literal",
		`"private": "HTTP 403 ` + egress.RuleAddress:                                             "a granted name resolving to a private address",
		`"redirect": "HTTP 403 ` + egress.RuleHost:                                               "a redirect to a name not granted",
		`"connect_port": "Tunnel connection failed: 403`:                                         "a CONNECT to a port not granted",
		`"raw_host": "error ConnectionRefusedError"`:                                             "a raw socket to the host's server",
		`"raw_out": "error OSError"`:                                                             "a raw socket out",
		`"dns": "error gaierror"`:                                                                "a DNS lookup in the sandbox",
		`"env": "files.test:` + s.port + `,private.test:` + s.port + `,secure.test:` + s.tlsPort: "FORGE_NETWORK",
	} {
		if !strings.Contains(o.Stdout, k) {
			t.Errorf("%s: want %s in %s", want, k, o.Stdout)
		}
	}
	if !strings.Contains(strings.Join(o.Notices, "\n"), "network granted: files.test:"+s.port) {
		t.Errorf("no notice of the grant: %q", o.Notices)
	}

	// Each refusal is audited with its rule, the granted connections as done.
	rules, done := map[string]bool{}, 0
	grants := 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		switch e.Event {
		case egress.EventGrant:
			grants++
		case egress.EventConnection:
			if r, _ := e.Details["rule"].(string); r != "" {
				rules[r] = true
			}
			if e.Details["outcome"] == egress.OutcomeDone {
				done++
			}
		}
	}
	for _, r := range []string{egress.RuleHost, egress.RuleIPLiteral, egress.RuleAddress, egress.RulePort} {
		if !rules[r] {
			t.Errorf("no connection audited with rule %s (rules: %v)", r, rules)
		}
	}
	if grants != 1 || done < 2 {
		t.Errorf("audit: %d grants, %d connections done; want 1 and at least 2", grants, done)
	}

	// pip downloads from a granted package index through HTTP_PROXY.
	o = out{}
	res = testenv.Call(t, cs, "execute_python", map[string]any{"network": []string{"files.test"}, "code": fmt.Sprintf(`import subprocess, sys, os
r = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--disable-pip-version-check', '--no-cache-dir', '-q', '-d', 'dl',
    '--index-url', 'http://files.test:%s/simple/', '--trusted-host', 'files.test', 'forgetest'], capture_output=True, text=True)
print(r.returncode, r.stderr[-500:])
sorted(os.listdir('dl')) if os.path.isdir('dl') else []`, s.port)}, &o)
	if res.IsError || o.ResultRepr != "['forgetest-0.1-py3-none-any.whl']" {
		t.Errorf("pip download from a granted index: %s %+v", testenv.Text(res), o)
	}

	// Without network, no proxy and no route.
	o = out{}
	res = testenv.Call(t, cs, "execute_python", map[string]any{"code": fmt.Sprintf(`import os, urllib.request
try:
    urllib.request.urlopen('http://files.test:%s/data', timeout=5); r = 'reached'
except Exception as e:
    r = type(e).__name__
(os.environ.get('HTTP_PROXY'), r)`, s.port)}, &o)
	if res.IsError || o.ResultRepr != "(None, 'URLError')" {
		t.Errorf("a run without network: %s %+v", testenv.Text(res), o)
	}

	// Refused before anything runs: a host the policy does not allow, a
	// port it does not allow, network in a session.
	for _, c := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"host not allowed", map[string]any{"network": []string{"evil.example.org"}}, "evil.example.org"},
		{"port not allowed", map[string]any{"network": []string{"files.test:22"}}, "port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.args["code"] = "print('ran')"
			var o out
			res := testenv.Call(t, cs, "execute_python", c.args, &o)
			if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, c.want) || strings.Contains(o.Stdout, "ran") {
				t.Fatalf("want a RequestError naming %q, got %s %+v", c.want, testenv.Text(res), o)
			}
		})
	}
	refused := 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		if e.Event == "request.refused" && strings.HasPrefix(fmt.Sprint(e.Details["rule"]), "network-") {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("%d network refusals audited, want 2", refused)
	}
}

// R reaches a granted name with download.file and url() connections
// (libcurl honours http_proxy), and not one that is not granted.
func TestNetworkFromR(t *testing.T) {
	s, _, cs := networkCore(t, nil)
	code := fmt.Sprintf(`f <- tempfile()
download.file("http://files.test:%[1]s/data", f, method = "libcurl", quiet = TRUE)
cat("granted:", readLines(f, warn = FALSE), "\n")
r <- tryCatch(readLines(url("http://other.test:%[1]s/data", method = "libcurl"), warn = FALSE), error = function(e) "refused", warning = function(w) "refused")
cat("ungranted:", r, "\n")`, s.port)
	var o out
	res := testenv.Call(t, cs, "execute_r", map[string]any{"code": code, "network": []string{"files.test"}}, &o)
	if res.IsError || !o.Success {
		t.Fatalf("R run with network: %s %+v", testenv.Text(res), o)
	}
	if !strings.Contains(o.Stdout, "granted: hello from files.test") || !strings.Contains(o.Stdout, "ungranted: refused") {
		t.Fatalf("R: %q", o.Stdout)
	}
}

// TestNetworkInImageWithoutPerl: the forwarder is the core's agent,
// mounted into the sandbox, so network by host name works in an image that
// has no perl (the Python image with it removed), from stateless runs and
// sessions.
func TestNetworkInImageWithoutPerl(t *testing.T) {
	testenv.PodmanOnly(t, "the image is built with this host's podman; on a cluster TestKubeImageWithoutPerl covers the pod's agent")
	image := noPerlImage(t)
	s, _, cs := networkCore(t, func(c *config.Config) {
		for _, name := range []string{"python", "jupyter"} {
			p := c.Plugins[name]
			if p.Config == nil {
				p.Config = map[string]any{}
			}
			p.Config["image"] = strings.TrimPrefix(image, "localhost/")
			c.Plugins[name] = p
		}
	})
	code := fmt.Sprintf("import shutil, urllib.request\nprint(shutil.which('perl'), urllib.request.urlopen('http://files.test:%s/data').read().decode())", s.port)
	for _, args := range []map[string]any{{"code": code}, {"code": code, "session_id": "noperl-net"}} {
		args["network"] = []string{"files.test"}
		var o out
		res := testenv.Call(t, cs, "execute_python", args, &o)
		if res.IsError || !o.Success || strings.TrimSpace(o.Stdout) != "None hello from files.test" {
			t.Fatalf("execute_python %v with network in an image without perl: %s %+v", args["session_id"], testenv.Text(res), o)
		}
	}
}

// A flood past the grant's budget is refused with the budget's rule while
// what came before it was served.
func TestNetworkBudget(t *testing.T) {
	s, p, cs := networkCore(t, func(c *config.Config) { c.Network.MaxConnections = 3 })
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"network": []string{"files.test"}, "code": fmt.Sprintf(`import urllib.request, urllib.error
got = []
for i in range(6):
    try:
        got.append(urllib.request.urlopen('http://files.test:%s/data', timeout=20).status)
    except urllib.error.HTTPError as e:
        got.append(e.headers.get('X-Mcp-Forge-Rule'))
got`, s.port)}, &o)
	want := fmt.Sprintf("[200, 200, 200, '%s', '%s', '%s']", egress.RuleBudgetConnections, egress.RuleBudgetConnections, egress.RuleBudgetConnections)
	if res.IsError || o.ResultRepr != want {
		t.Fatalf("want %s, got %s %+v", want, testenv.Text(res), o)
	}
	n := 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		if e.Event == egress.EventConnection && e.Details["rule"] == egress.RuleBudgetConnections {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d connections audited as past the budget, want 3", n)
	}
}

// A session granted network on its first call keeps it in its kernel,
// Python (ipykernel) and R (IRkernel); a session started without network
// is refused network later; destroying the session closes its channel.
func TestNetworkInSession(t *testing.T) {
	s, p, cs := networkCore(t, nil)
	get := fmt.Sprintf("import urllib.request\nurllib.request.urlopen('http://files.test:%s/data', timeout=20).read().decode()", s.port)
	for _, c := range []struct{ lang, code, want string }{
		{"python", get, "'hello from files.test'"},
		{"r", fmt.Sprintf(`readLines(url("http://files.test:%s/data", method = "libcurl"), warn = FALSE)`, s.port), `"hello from files.test"`},
	} {
		t.Run(c.lang, func(t *testing.T) {
			sid := "net-" + c.lang
			for i, args := range []map[string]any{
				{"code": c.code, "session_id": sid, "network": []string{"files.test"}},
				{"code": c.code, "session_id": sid}, // the second call keeps the session's network
			} {
				var o out
				res := testenv.Call(t, cs, "execute_"+c.lang, args, &o)
				if res.IsError || !o.Success || !strings.Contains(o.ResultRepr+o.Stdout, c.want) {
					t.Fatalf("call %d: %s %+v", i+1, testenv.Text(res), o)
				}
				if !strings.Contains(strings.Join(o.Notices, "\n"), "network granted: files.test:"+s.port) {
					t.Errorf("call %d: no notice of the session's network: %q", i+1, o.Notices)
				}
			}
			var d map[string]any
			if res := testenv.Call(t, cs, "destroy_session", map[string]any{"session_id": sid}, &d); res.IsError {
				t.Fatalf("destroy: %s", testenv.Text(res))
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(p.Forge.Config.Volumes.BasePath, "net")); len(entries) != 0 {
		t.Errorf("channels left after their sessions: %d", len(entries))
	}
	// A session started without network is not granted it later.
	execIn(t, cs, "python", "plain", "x = 1")
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": get, "session_id": "plain", "network": []string{"files.test"}}, &o)
	if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, "started without network") {
		t.Fatalf("network on a later call: %s %+v", testenv.Text(res), o)
	}
}

// With network.require_approval the user is asked (MCP elicitation) naming
// the hosts: an accept grants them, a decline refuses the run, and a
// client that cannot be asked gets no network.
func TestNetworkApprovalByElicitation(t *testing.T) {
	s, p, plain := networkCore(t, func(c *config.Config) { c.Network.RequireApproval = true })
	var asked []string
	answer := "accept"
	client := mcp.NewClient(&mcp.Implementation{Name: "forge-e2e-approver", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, r.Params.Message)
			return &mcp.ElicitResult{Action: answer, Content: map[string]any{}}, nil
		}})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := p.Forge.MCP.MCP().Connect(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := client.Connect(context.Background(), ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	code := fmt.Sprintf("import urllib.request\nurllib.request.urlopen('http://files.test:%s/data', timeout=20).read().decode()", s.port)
	args := map[string]any{"code": code, "network": []string{"files.test"}}
	var o out
	res := testenv.Call(t, cs, "execute_python", args, &o)
	if res.IsError || o.ResultRepr != "'hello from files.test'" || len(asked) != 1 || !strings.Contains(asked[0], "files.test:"+s.port) {
		t.Fatalf("approved: %s %+v (asked %q)", testenv.Text(res), o, asked)
	}
	for _, c := range []struct {
		name string
		cs   *mcp.ClientSession
		want string
	}{
		{"declined", cs, "declined"},
		{"cannot be asked", plain, "cannot be asked"},
	} {
		answer = "decline"
		o = out{}
		res := testenv.Call(t, c.cs, "execute_python", args, &o)
		if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(o.Error.Message, c.want) {
			t.Errorf("%s: %s %+v", c.name, testenv.Text(res), o)
		}
	}
}

// An input file named by URL is fetched by the server through the egress
// proxy, under the caller's network policy: a granted host's file reaches
// the run read-only, a host the policy does not allow is refused before
// anything runs, an answer other than 200 is refused with its status; the
// fetch is audited, its connection too. A file with a validator is kept
// for its caller and revalidated on the next use: a 304 serves the copy.
func TestInputFileURL(t *testing.T) {
	s, p, cs := networkCore(t, nil)
	var o out
	code := "print(open('got/data.txt').read())"
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": code,
		"input_files": []map[string]any{{"path": "got/data.txt", "url": "http://files.test:" + s.port + "/data?token=secret"}}}, &o)
	if res.IsError || strings.TrimSpace(o.Stdout) != "hello from files.test" {
		t.Fatalf("a URL input file: %s %+v", testenv.Text(res), o)
	}
	for _, c := range []struct{ url, want string }{
		{"http://other.test:" + s.port + "/data", "other.test"},
		{"http://files.test:" + s.port + "/missing", "404"},
		{"http://files.test:" + s.port + "/redirect", "redirects"},
		{"ftp://files.test/data", "https://"},
	} {
		o = out{}
		res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "print('ran')", "input_files": []map[string]any{{"path": "x", "url": c.url}}}, &o)
		if !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, c.want) || strings.Contains(o.Stdout, "ran") {
			t.Errorf("%s: %s %+v, want a refusal naming %q", c.url, testenv.Text(res), o, c.want)
		}
	}
	for i := range 2 {
		o = out{}
		res := testenv.Call(t, cs, "execute_python", map[string]any{"code": "print(open('v.txt').read())",
			"input_files": []map[string]any{{"path": "v.txt", "url": "http://files.test:" + s.port + "/versioned"}}}, &o)
		if res.IsError || strings.TrimSpace(o.Stdout) != "versioned file" {
			t.Fatalf("a versioned URL input file, run %d: %s %+v", i, testenv.Text(res), o)
		}
	}
	if n := s.notModified.Load(); n != 1 {
		t.Errorf("/versioned answered 304 %d times, want once (the second run's revalidation)", n)
	}
	var caches []any
	secret := false
	data, _ := os.ReadFile(p.Forge.Config.Security.AuditLog)
	secret = strings.Contains(string(data), "token=secret")
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		if e.Event == "file.fetch" {
			caches = append(caches, e.Details["cache"])
		}
	}
	if fmt.Sprint(caches) != "[uncached stored revalidated]" || secret {
		t.Errorf("audit: fetches with cache %v (want [uncached stored revalidated]), query string kept: %v", caches, secret)
	}
}
