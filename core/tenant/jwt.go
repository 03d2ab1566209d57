package tenant

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// JWT verifies bearer JWTs against the public keys of a JWKS file: the
// signature, issuer, audience, expiry (required) and not-before; the tenant
// is a claim. Scopes are reported for the HTTP layer to require.
type JWT struct {
	cfg  config.JWT
	keys jose.JSONWebKeySet
	now  func() time.Time
}

var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// NewJWT reads the key set. Private keys in the file are reduced to their
// public halves (the server never signs).
func NewJWT(cfg config.JWT) (*JWT, error) {
	b, err := os.ReadFile(cfg.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("auth.jwt.jwks_file: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("auth.jwt.jwks_file %s: not a JSON Web Key Set: %w", cfg.JWKSFile, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("auth.jwt.jwks_file %s: no keys", cfg.JWKSFile)
	}
	for i, k := range set.Keys {
		if !k.Valid() {
			return nil, fmt.Errorf("auth.jwt.jwks_file %s: key %d (kid %q) is not valid", cfg.JWKSFile, i, k.KeyID)
		}
		if !k.IsPublic() {
			set.Keys[i] = k.Public()
		}
	}
	return &JWT{cfg: cfg, keys: set, now: time.Now}, nil
}

// LooksLikeJWT tells a compact JWS (three base64url parts) from an API key.
func LooksLikeJWT(token string) bool { return strings.Count(token, ".") == 2 }

// Verify returns the token's tenant claim, scopes and expiry.
func (j *JWT) Verify(token string) (tenant string, scopes []string, exp time.Time, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", auth.ErrInvalidToken, fmt.Sprintf(format, args...))
	}
	tok, err := jwt.ParseSigned(token, algorithms)
	if err != nil {
		return "", nil, exp, bad("not a signed JWT: %v", err)
	}
	var std jwt.Claims
	var extra map[string]any
	if err := tok.Claims(&j.keys, &std, &extra); err != nil {
		return "", nil, exp, bad("signature does not verify against auth.jwt.jwks_file: %v", err)
	}
	if std.Expiry == nil {
		return "", nil, exp, bad("no exp claim: tokens must expire")
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: j.cfg.Issuer, AnyAudience: jwt.Audience{j.cfg.Audience}, Time: j.now()},
		time.Duration(j.cfg.Leeway)*time.Second)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return "", nil, exp, bad("issuer %q is not auth.jwt.issuer", std.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return "", nil, exp, bad("audience %v does not include auth.jwt.audience", []string(std.Audience))
	case errors.Is(err, jwt.ErrExpired):
		return "", nil, exp, bad("expired at %s", std.Expiry.Time().UTC().Format(time.RFC3339))
	case err != nil:
		return "", nil, exp, bad("%v", err)
	}
	t, _ := extra[j.cfg.TenantClaim].(string)
	if t == "" {
		return "", nil, exp, bad("no %q claim naming the tenant (auth.jwt.tenant_claim)", j.cfg.TenantClaim)
	}
	switch s := extra["scope"].(type) {
	case string:
		scopes = strings.Fields(s)
	}
	if l, ok := extra["scp"].([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok && !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
		}
	}
	return t, scopes, std.Expiry.Time(), nil
}
