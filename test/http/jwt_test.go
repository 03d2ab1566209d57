package httpe2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// JWTs from a JWKS file name tenants beside API keys; the RFC 9728
// metadata is served and announced in the 401 challenge; a token without
// the required scope gets 403.
func TestHTTPJWTAndResourceMetadata(t *testing.T) {
	testenv.Require(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwks := filepath.Join(dir, "jwks.json")
	os.WriteFile(jwks, set, 0o644)
	tenants, keys := testenv.TenantKeys(t, "alice")
	s := testenv.StartHTTP(t, tenants+`[tenants.bob]
[auth.jwt]
jwks_file = "`+jwks+`"
issuer = "https://idp.example"
audience = "mcp-forge"
required_scopes = ["mcp:run"]
resource_url = "https://forge.example/mcp"
authorization_servers = ["https://idp.example"]
`)
	signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
	token := func(scope string) string {
		tok, err := jwt.Signed(signer).Claims(map[string]any{"iss": "https://idp.example", "aud": "mcp-forge", "sub": "bob",
			"exp": time.Now().Add(time.Hour).Unix(), "scope": scope}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	code, body := s.Get(t, "/.well-known/oauth-protected-resource/mcp", "")
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if json.Unmarshal([]byte(body), &meta); code != 200 || meta.Resource != "https://forge.example/mcp" || len(meta.AuthorizationServers) != 1 {
		t.Fatalf("metadata: %d %s", code, body)
	}
	code, h, _ := post(t, s.URL, "", "application/json", []byte(listTools))
	if code != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `resource_metadata="https://forge.example/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("challenge: %d %q", code, h.Get("WWW-Authenticate"))
	}
	if code, _, body := post(t, s.URL, token("read"), "application/json", []byte(listTools)); code != http.StatusForbidden {
		t.Errorf("token without mcp:run: %d %s, want 403", code, body)
	}
	bob := s.MustConnect(t, token("mcp:run"))
	if res, out := call(t, bob, "execute_python", map[string]any{"code": "6*7"}); res.IsError || out.Result != "42" {
		t.Fatalf("bob with a JWT: %s", testenv.Text(res))
	}
	alice := s.MustConnect(t, keys["alice"])
	if res, _ := call(t, alice, "execute_python", map[string]any{"code": "1"}); res.IsError {
		t.Fatalf("alice with an API key: %s", testenv.Text(res))
	}
	b, _ := os.ReadFile(s.AuditLog)
	if !strings.Contains(string(b), `"user_id":"bob"`) {
		t.Error("no audit line names bob")
	}
}

// The issuer rotates its keys under a running server: discovery finds the
// key set, the new key works from its first token, and the removed one is
// refused from then on, also for a client connected before.
func TestHTTPJWTKeysRotateWithoutRestart(t *testing.T) {
	testenv.Require(t)
	k1, err1 := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, err2 := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	var mu sync.Mutex
	published := []jose.JSONWebKey{{Key: k1.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}
	fetches := 0
	var idp *httptest.Server
	idp = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			json.NewEncoder(w).Encode(map[string]string{"issuer": idp.URL, "jwks_uri": idp.URL + "/jwks"})
		case "/jwks":
			fetches++
			w.Header().Set("Cache-Control", "max-age=3600")
			json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: published})
		default:
			http.NotFound(w, r)
		}
	}))
	defer idp.Close()
	s := testenv.StartHTTP(t, `[tenants.bob]
[auth.jwt]
discovery = true
issuer = "`+idp.URL+`"
audience = "mcp-forge"
jwks_min_refresh = 1
`)
	token := func(key *ecdsa.PrivateKey, kid string) string {
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, nil)
		tok, err := jwt.Signed(signer).Claims(map[string]any{"iss": idp.URL, "aud": "mcp-forge", "sub": "bob",
			"exp": time.Now().Add(time.Hour).Unix()}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	old := s.MustConnect(t, token(k1, "k1"))
	if res, out := call(t, old, "execute_python", map[string]any{"code": "6*7"}); res.IsError || out.Result != "42" {
		t.Fatalf("k1 before the rotation: %s", testenv.Text(res))
	}

	mu.Lock()
	published = []jose.JSONWebKey{{Key: k2.Public(), KeyID: "k2", Algorithm: "ES256", Use: "sig"}}
	mu.Unlock()
	time.Sleep(1100 * time.Millisecond) // jwks_min_refresh since the fetch at start
	bob := s.MustConnect(t, token(k2, "k2"))
	if res, out := call(t, bob, "execute_python", map[string]any{"code": "6*7"}); res.IsError || out.Result != "42" {
		t.Fatalf("k2 after the rotation: %s", testenv.Text(res))
	}
	if code, _, body := post(t, s.URL, token(k1, "k1"), "application/json", []byte(listTools)); code != http.StatusUnauthorized {
		t.Errorf("a token of the removed key k1: %d %s, want 401", code, body)
	}
	if _, err := old.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_python", Arguments: map[string]any{"code": "1"}}); err == nil {
		t.Error("the client connected with k1 still calls tools after the issuer removed k1")
	}
	mu.Lock()
	n := fetches
	mu.Unlock()
	if n != 2 {
		t.Errorf("the key set was fetched %d times, want 2 (at start, then for k2's first token)", n)
	}
}
