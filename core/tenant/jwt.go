package tenant

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// JWT verifies bearer JWTs against the issuer's public keys (a JWKS file,
// a JWKS URL, or the URL the issuer's discovery document names; fetched
// again as they expire or rotate): the signature, issuer, audience, expiry
// (required) and not-before; the tenant is a claim. Scopes are reported
// for the HTTP layer to require.
type JWT struct {
	cfg  config.JWT
	keys *keySet
	now  func() time.Time
}

var algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// NewJWT reads or fetches the key set once: a server whose keys cannot be
// had does not start.
func NewJWT(ctx context.Context, cfg config.JWT, log hclog.Logger) (*JWT, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	k, err := newKeySet(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return &JWT{cfg: cfg, keys: k, now: time.Now}, nil
}

// Source says where the keys come from and how many there are.
func (j *JWT) Source() string {
	return fmt.Sprintf("%s (%d keys)", j.keys.source(), len(j.keys.keys().Keys))
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
	kid := tok.Headers[0].KeyID
	keys := j.keys.fresh(kid)
	var std jwt.Claims
	var extra map[string]any
	if err := tok.Claims(keys, &std, &extra); err != nil {
		if !holds(keys, kid) {
			return "", nil, exp, bad("signed by key %q, which %s does not hold", kid, j.keys.source())
		}
		return "", nil, exp, bad("signature does not verify against %s: %v", j.keys.source(), err)
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
