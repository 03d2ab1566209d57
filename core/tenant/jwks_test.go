package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// fakeIssuer serves an OpenID configuration and a JWKS whose keys the
// test rotates, and counts the fetches of the set.
type fakeIssuer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    []issuer
	body    string // served instead of the keys when set
	cache   string
	issuer  string // the discovery document's issuer; the server's URL when empty
	fetches atomic.Int32
}

func newFakeIssuer(t *testing.T, keys ...issuer) *fakeIssuer {
	f := &fakeIssuer{keys: keys}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			iss := f.issuer
			if iss == "" {
				iss = f.srv.URL
			}
			json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": f.srv.URL + "/keys"})
		case "/keys":
			f.fetches.Add(1)
			if f.cache != "" {
				w.Header().Set("Cache-Control", f.cache)
			}
			if f.body != "" {
				fmt.Fprint(w, f.body)
				return
			}
			var set jose.JSONWebKeySet
			for _, k := range f.keys {
				set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.kid, Algorithm: "ES256", Use: "sig"})
			}
			json.NewEncoder(w).Encode(set)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIssuer) rotate(keys ...issuer) {
	f.mu.Lock()
	f.keys = keys
	f.mu.Unlock()
}

func (f *fakeIssuer) serve(body string) {
	f.mu.Lock()
	f.body = body
	f.mu.Unlock()
}

// clock is a settable time for the key set's ages and refetch bound.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func jwtFor(t *testing.T, mut func(*config.JWT)) (*JWT, *clock) {
	t.Helper()
	cfg := config.Default()
	cfg.Tenants["bob"] = config.Tenant{}
	cfg.Auth.JWT = config.JWT{Issuer: "https://idp.example", Audience: "mcp-forge", TenantClaim: "sub", Leeway: 30, JWKSMinRefresh: 30}
	mut(&cfg.Auth.JWT)
	if errs := config.Validate(cfg); len(errs) > 0 {
		t.Fatal(errs)
	}
	j, err := NewJWT(context.Background(), cfg.Auth.JWT, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Now()}
	j.keys.now = c.now
	return j, c
}

func claims(iss string) map[string]any {
	return map[string]any{"iss": iss, "aud": "mcp-forge", "sub": "bob", "exp": time.Now().Add(time.Hour).Unix()}
}

// waitFetches waits for a background refetch to be counted.
func waitFetches(t *testing.T, f *fakeIssuer, n int32) {
	t.Helper()
	for i := 0; i < 200 && f.fetches.Load() < n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.fetches.Load(); got != n {
		t.Fatalf("the key set was fetched %d times, want %d", got, n)
	}
}

// A key the issuer adds is used as soon as a token names it; a key it
// removes stops verifying once the set's max-age ran out; tokens naming
// made-up keys make at most one fetch per jwks_min_refresh.
func TestJWKSURIRotation(t *testing.T) {
	k1, k2 := newIssuer(t, "k1"), newIssuer(t, "k2")
	f := newFakeIssuer(t, k1)
	f.cache = "public, max-age=300"
	j, c := jwtFor(t, func(j *config.JWT) { j.JWKSURI = f.srv.URL + "/keys" })
	verify := func(tok string) error { _, _, _, err := j.Verify(tok); return err }
	if err := verify(k1.sign(t, claims("https://idp.example"))); err != nil {
		t.Fatalf("k1 before rotation: %v", err)
	}
	waitFetches(t, f, 1)

	// The issuer adds k2 and signs with it; 30 s after the first fetch the
	// unknown kid makes one fetch, and both keys verify.
	f.rotate(k1, k2)
	c.add(31 * time.Second)
	if err := verify(k2.sign(t, claims("https://idp.example"))); err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	waitFetches(t, f, 2)

	// Made-up key ids, many: no fetch within jwks_min_refresh.
	for i := range 20 {
		err := verify(newIssuer(t, fmt.Sprintf("bogus%d", i)).sign(t, claims("https://idp.example")))
		if !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), "does not hold") {
			t.Fatalf("bogus kid: %v", err)
		}
	}
	waitFetches(t, f, 2)

	// The issuer drops k1: within max-age it still verifies; past it the
	// next call refetches in the background and then k1 is refused.
	f.rotate(k2)
	c.add(200 * time.Second)
	if err := verify(k1.sign(t, claims("https://idp.example"))); err != nil {
		t.Fatalf("k1 within max-age: %v", err)
	}
	c.add(200 * time.Second)
	verify(k2.sign(t, claims("https://idp.example")))
	waitFetches(t, f, 3)
	for j.keys.refreshing.Load() { // the refetch counted, its set not yet stored
		time.Sleep(5 * time.Millisecond)
	}
	if err := verify(k1.sign(t, claims("https://idp.example"))); err == nil || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("k1 after the issuer dropped it: %v", err)
	}
}

// A refetch that gets a broken set, an error or an oversized answer keeps
// the last good set.
func TestJWKSBadRefetchKeepsKeys(t *testing.T) {
	k1 := newIssuer(t, "k1")
	f := newFakeIssuer(t, k1)
	j, c := jwtFor(t, func(j *config.JWT) { j.JWKSURI = f.srv.URL + "/keys"; j.JWKSMinRefresh = 1 })
	for _, body := range []string{`{"keys": []}`, `not json`, `{"keys":[{"kty":"EC"}]}`, strings.Repeat(" ", jwksMaxBytes+1)} {
		f.serve(body)
		c.add(2 * time.Hour)
		err := j.keys.refresh(context.Background(), false)
		if err == nil {
			t.Errorf("refetch of %.20q: no error", body)
		}
		if _, _, _, err := j.Verify(k1.sign(t, claims("https://idp.example"))); err != nil {
			t.Errorf("after a refetch of %.20q: k1 refused: %v", body, err)
		}
	}
}

// Discovery reads jwks_uri from the issuer's OpenID configuration, which
// must name the configured issuer.
func TestJWKSDiscovery(t *testing.T) {
	k1 := newIssuer(t, "k1")
	f := newFakeIssuer(t, k1)
	j, _ := jwtFor(t, func(j *config.JWT) { j.Issuer = f.srv.URL; j.Discovery = true })
	if _, _, _, err := j.Verify(k1.sign(t, claims(f.srv.URL))); err != nil {
		t.Fatalf("token from the discovered keys: %v", err)
	}
	if !strings.Contains(j.Source(), "OpenID configuration") || !strings.Contains(j.Source(), "1 keys") {
		t.Errorf("source: %s", j.Source())
	}
	f.issuer = "https://evil.example"
	cfg := config.JWT{Issuer: f.srv.URL, Discovery: true, JWKSMinRefresh: 30}
	if _, err := NewJWT(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), `names issuer "https://evil.example"`) {
		t.Fatalf("discovery naming another issuer: %v", err)
	}
	f.issuer = ""
	f.srv.Close()
	if _, err := NewJWT(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "auth.jwt.discovery") {
		t.Fatalf("issuer down at start: %v", err)
	}
}

// A JWKS file is reread when it changes and a token names a key it lacks.
func TestJWKSFileRotation(t *testing.T) {
	k1, k2 := newIssuer(t, "k1"), newIssuer(t, "k2")
	path := filepath.Join(t.TempDir(), "jwks.json")
	write := func(keys ...issuer) {
		var set jose.JSONWebKeySet
		for _, k := range keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.kid, Algorithm: "ES256"})
		}
		b, _ := json.Marshal(set)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(k1)
	j, c := jwtFor(t, func(j *config.JWT) { j.JWKSFile = path })
	write(k1, k2)
	c.add(31 * time.Second)
	if _, _, _, err := j.Verify(k2.sign(t, claims("https://idp.example"))); err != nil {
		t.Fatalf("k2 added to the file: %v", err)
	}
}

func TestJWKSConfig(t *testing.T) {
	cases := map[string]struct {
		mut  func(*config.JWT)
		want string
	}{
		"two sources":       {func(j *config.JWT) { j.JWKSFile = "/k.json"; j.JWKSURI = "https://idp.example/keys" }, "auth.jwt.jwks_uri: set one key source"},
		"plain http":        {func(j *config.JWT) { j.JWKSURI = "http://idp.example/keys" }, "https only"},
		"not a URL":         {func(j *config.JWT) { j.JWKSURI = "idp.example/keys" }, "not an https URL"},
		"discovery on http": {func(j *config.JWT) { j.Discovery = true; j.Issuer = "http://idp.example" }, "auth.jwt.issuer"},
		"refresh bound":     {func(j *config.JWT) { j.JWKSURI = "https://idp.example/keys"; j.JWKSMinRefresh = 0 }, "auth.jwt.jwks_min_refresh"},
	}
	for name, c := range cases {
		cfg := config.Default()
		cfg.Tenants["bob"] = config.Tenant{}
		cfg.Auth.JWT.Issuer, cfg.Auth.JWT.Audience = "https://idp.example", "a"
		c.mut(&cfg.Auth.JWT)
		errs := config.Validate(cfg)
		if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), c.want) {
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
	ok := config.Default()
	ok.Tenants["bob"] = config.Tenant{}
	ok.Auth.JWT.Issuer, ok.Auth.JWT.Audience, ok.Auth.JWT.JWKSURI = "https://idp.example", "a", "http://127.0.0.1:8080/keys"
	if errs := config.Validate(ok); len(errs) > 0 {
		t.Errorf("http to loopback: %v", errs)
	}
}

func TestHTTPSRedirectsOnly(t *testing.T) {
	req := func(u string) *http.Request { p, _ := url.Parse(u); return &http.Request{URL: p} }
	if err := httpsRedirectsOnly(req("http://idp.example/keys"), []*http.Request{req("https://idp.example/keys")}); err == nil {
		t.Error("a redirect from https to http was followed")
	}
	if err := httpsRedirectsOnly(req("https://cdn.example/keys"), []*http.Request{req("https://idp.example/keys")}); err != nil {
		t.Errorf("https to https: %v", err)
	}
}

// A fetch that hangs (a slow issuer, made to refetch by a made-up key id)
// holds only the tokens naming keys the set lacks.
func TestJWKSSlowFetchHoldsNoKnownKey(t *testing.T) {
	k1 := newIssuer(t, "k1")
	f := newFakeIssuer(t, k1)
	j, c := jwtFor(t, func(j *config.JWT) { j.JWKSURI = f.srv.URL + "/keys" })
	release := make(chan struct{})
	f.mu.Lock()
	go func() { <-release; f.mu.Unlock() }() // the issuer answers nothing until released
	c.add(31 * time.Second)
	go j.Verify(newIssuer(t, "bogus").sign(t, claims("https://idp.example")))
	time.Sleep(50 * time.Millisecond) // the bogus token's fetch is under way
	done := make(chan error, 1)
	go func() { _, _, _, err := j.Verify(k1.sign(t, claims("https://idp.example"))); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("k1 while a fetch hangs: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("a token of a known key waited for a hanging fetch")
	}
	close(release)
}
