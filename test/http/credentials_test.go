package httpe2e

import (
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

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Over HTTP each tenant's runs get its own credential when it has one of
// the name, the global one otherwise, and never another tenant's; the
// values reach the API and appear nowhere in the server's log or audit.
func TestHTTPTenantCredentials(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	const global, alices = "global-value-0123456789", "alice-value-0123456789"
	tenants, keys := testenv.TenantKeys(t, "alice", "bob")
	host := "api.example.com:" + port
	cfg := tenants + fmt.Sprintf(`
[network]
allowed_hosts = [%[1]q]
allowed_cidrs = ["127.0.0.1/32"]
hosts = { "api.example.com" = "127.0.0.1" }
[network.credentials.api]
hosts = [%[1]q]
value_env = "FORGE_TEST_GLOBAL_API"
ca_file = %[2]q
[tenants.alice.credentials.api]
hosts = [%[1]q]
value_env = "FORGE_TEST_ALICE_API"
ca_file = %[2]q
[tenants.alice.credentials.alice_only]
hosts = [%[1]q]
type = "header"
header = "X-Api-Key"
value_env = "FORGE_TEST_ALICE_API"
ca_file = %[2]q
`, host, ca)
	s := testenv.StartHTTP(t, cfg, "FORGE_TEST_GLOBAL_API="+global, "FORGE_TEST_ALICE_API="+alices)
	code := fmt.Sprintf(`import os, urllib.request
r = urllib.request.Request('https://%s/', headers={'Authorization': 'Bearer ' + os.environ['FORGE_CREDENTIAL_API']})
print(urllib.request.urlopen(r, timeout=20).read().decode())`, host)
	for _, tc := range []struct{ tenant, want string }{{"alice", alices}, {"bob", global}} {
		cs := s.MustConnect(t, keys[tc.tenant])
		res, out := call(t, cs, "execute_python", map[string]any{"code": code, "credentials": []string{"api"}})
		if res.IsError || strings.TrimSpace(out.Stdout) != "ok" {
			t.Fatalf("%s: %s", tc.tenant, testenv.Text(res))
		}
		mu.Lock()
		last := seen[len(seen)-1]
		mu.Unlock()
		if last != "Bearer "+tc.want {
			t.Errorf("%s's run arrived with %q, want its own value", tc.tenant, last)
		}
		if tc.tenant == "bob" {
			res, out := call(t, cs, "execute_python", map[string]any{"code": "print('ran')", "credentials": []string{"alice_only"}})
			if !res.IsError || out.Error == nil || !strings.Contains(out.Error.Message, "available: api") {
				t.Errorf("bob asking for alice's credential: %s", testenv.Text(res))
			}
		}
	}
	for _, f := range []string{s.LogFile, s.AuditLog} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), global) || strings.Contains(string(b), alices) {
			t.Errorf("%s holds a credential's value", f)
		}
	}
}
