package httpe2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

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
