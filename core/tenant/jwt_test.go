package tenant

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcp-forge/mcp-forge/core/config"
)

type issuer struct {
	key *ecdsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T, kid string) issuer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return issuer{k, kid}
}

func (i issuer) sign(t *testing.T, claims map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: i.key, KeyID: i.kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// jwtRegistry has tenants alice (API key "ka") and bob (JWT only), and a
// JWKS holding good's public key (the file holds the private key: the
// server must reduce it to its public half).
func jwtRegistry(t *testing.T, good issuer, scopes []string) *Registry {
	t.Helper()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: good.key, KeyID: good.kid, Algorithm: "ES256", Use: "sig"}}}
	b, _ := json.Marshal(set)
	path := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(path, b, 0o600)
	cfg := config.Default()
	cfg.Tenants["alice"] = config.Tenant{APIKeySHA256: []string{HashKey("ka")}}
	cfg.Tenants["bob"] = config.Tenant{}
	cfg.Auth.JWT = config.JWT{JWKSFile: path, Issuer: "https://idp.example", Audience: "mcp-forge", TenantClaim: "sub", RequiredScopes: scopes, Leeway: 30, JWKSMinRefresh: 30}
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	r := New(cfg)
	j, err := NewJWT(context.Background(), cfg.Auth.JWT, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !j.keys.keys().Keys[0].IsPublic() {
		t.Fatal("the verifier kept a private key")
	}
	r.UseJWT(j)
	return r
}

func TestJWTVerify(t *testing.T) {
	good, other := newIssuer(t, "k1"), newIssuer(t, "k1")
	r := jwtRegistry(t, good, []string{"mcp:run"})
	now := time.Now()
	base := func(mut func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "https://idp.example", "aud": []string{"mcp-forge"}, "sub": "bob",
			"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "scope": "mcp:run other"}
		if mut != nil {
			mut(c)
		}
		return c
	}
	ti, err := r.Verify(context.Background(), good.sign(t, base(nil)), nil)
	if err != nil || ti.UserID != "bob" || strings.Join(ti.Scopes, " ") != "mcp:run other" || ti.Expiration.Unix() != now.Add(time.Hour).Unix() {
		t.Fatalf("valid token: %+v %v", ti, err)
	}
	// An API key still works, and carries the required scopes.
	if ti, err := r.Verify(context.Background(), "ka", nil); err != nil || ti.UserID != "alice" || len(ti.Scopes) != 1 {
		t.Fatalf("API key beside JWT: %+v %v", ti, err)
	}
	cases := map[string]struct {
		tok  string
		want string
	}{
		"other key":           {other.sign(t, base(nil)), "signature does not verify"},
		"unknown key id":      {newIssuer(t, "k9").sign(t, base(nil)), `signed by key "k9", which auth.jwt.jwks_file`},
		"wrong issuer":        {good.sign(t, base(func(c map[string]any) { c["iss"] = "https://evil.example" })), "issuer"},
		"wrong audience":      {good.sign(t, base(func(c map[string]any) { c["aud"] = []string{"other"} })), "audience"},
		"expired":             {good.sign(t, base(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })), "expired"},
		"no exp":              {good.sign(t, base(func(c map[string]any) { delete(c, "exp") })), "no exp"},
		"not yet valid":       {good.sign(t, base(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() })), "not valid yet"},
		"unknown tenant":      {good.sign(t, base(func(c map[string]any) { c["sub"] = "mallory" })), `tenant "mallory"`},
		"no tenant claim":     {good.sign(t, base(func(c map[string]any) { delete(c, "sub") })), `no "sub" claim`},
		"garbage":             {"a.b.c", "not a signed JWT"},
		"unsigned (alg none)": {"eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IifQ.", "not a signed JWT"},
	}
	for name, c := range cases {
		_, err := r.Verify(context.Background(), c.tok, nil)
		if !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidToken mentioning %q", name, err, c.want)
		}
	}
	// Within the leeway an expired token still passes (clock skew).
	if _, err := r.Verify(context.Background(), good.sign(t, base(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() })), nil); err != nil {
		t.Errorf("10 s past exp with 30 s leeway: %v", err)
	}
}
