package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
)

const (
	// jwksMaxBytes bounds a fetched key set or discovery document.
	jwksMaxBytes = 1 << 20
	// jwksFetchTimeout bounds one fetch, which a request may wait on.
	jwksFetchTimeout = 10 * time.Second
	// jwksDefaultAge is how long a fetched set is kept when its answer
	// says nothing (Cache-Control max-age), and a file between stats.
	jwksDefaultAge = time.Hour
	jwksMaxAge     = 24 * time.Hour
	jwksFileAge    = time.Minute
)

// keySet holds the issuer's public keys and refetches them: when their
// age runs out (in the background, the old set serving meanwhile) and when
// a token names a key the set lacks (at most once per minRefresh, so
// tokens with made-up key ids cannot make the server hammer the issuer).
// A failed refetch keeps the last good set.
type keySet struct {
	cfg        config.JWT
	client     *http.Client
	log        hclog.Logger
	now        func() time.Time
	minRefresh time.Duration

	set atomic.Pointer[jose.JSONWebKeySet]

	// expires is when the set is refetched in the background (unix ns),
	// read without mu: a slow fetch holds mu and must not hold a request
	// whose key the set has.
	expires    atomic.Int64
	refreshing atomic.Bool // a background refetch is under way

	mu        sync.Mutex // one fetch at a time; guards the fields below
	lastTry   time.Time
	fileStamp string // the file's size and mtime at its last read
}

func newKeySet(ctx context.Context, cfg config.JWT, log hclog.Logger) (*keySet, error) {
	k := &keySet{cfg: cfg, log: log, now: time.Now, minRefresh: time.Duration(max(cfg.JWKSMinRefresh, 1)) * time.Second,
		client: &http.Client{Timeout: jwksFetchTimeout, CheckRedirect: httpsRedirectsOnly}}
	if err := k.refresh(ctx, true); err != nil {
		return nil, err
	}
	return k, nil
}

// httpsRedirectsOnly keeps a redirect from downgrading a key fetch to
// plain http (the configuration allows that to loopback only).
func httpsRedirectsOnly(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("more than 5 redirects")
	}
	if req.URL.Scheme != "https" && via[0].URL.Scheme == "https" {
		return fmt.Errorf("redirect from https to %s refused", req.URL.Redacted())
	}
	return nil
}

// source names where the keys come from, for errors and doctor.
func (k *keySet) source() string {
	switch {
	case k.cfg.JWKSFile != "":
		return "auth.jwt.jwks_file " + k.cfg.JWKSFile
	case k.cfg.JWKSURI != "":
		return "auth.jwt.jwks_uri " + k.cfg.JWKSURI
	default:
		return "the OpenID configuration of auth.jwt.issuer " + k.cfg.Issuer
	}
}

func (k *keySet) keys() *jose.JSONWebKeySet { return k.set.Load() }

// holds reports whether set has a key with this id (a token without one
// is tried against every key).
func holds(set *jose.JSONWebKeySet, kid string) bool {
	return kid == "" || len(set.Key(kid)) > 0
}

// fresh returns the current set, refetching it first when a token names
// a key it lacks and the last try is old enough, and in the background
// when it has expired.
func (k *keySet) fresh(kid string) *jose.JSONWebKeySet {
	if !holds(k.keys(), kid) {
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		defer cancel()
		if err := k.refresh(ctx, false); err != nil {
			k.log.Warn("could not refetch the JWT signing keys for a token naming an unknown key; the last set stays", "kid", kid, "error", err)
		}
		return k.keys()
	}
	if k.now().UnixNano() > k.expires.Load() && k.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer k.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
			defer cancel()
			if err := k.refresh(ctx, false); err != nil {
				k.log.Warn("could not refetch the expired JWT signing keys; the last set stays", "error", err)
			}
		}()
	}
	return k.keys()
}

// refresh fetches the set unless the last try was under minRefresh ago
// (first: fetch regardless, and fail if nothing is usable).
func (k *keySet) refresh(ctx context.Context, first bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if !first && now.Sub(k.lastTry) < k.minRefresh {
		return nil
	}
	k.lastTry = now
	set, age, err := k.fetch(ctx)
	if err != nil {
		if !first {
			// Tried again after minRefresh, not on every request.
			k.expires.Store(now.Add(k.minRefresh).UnixNano())
		}
		return err
	}
	if set == nil { // a file that did not change
		k.expires.Store(now.Add(age).UnixNano())
		return nil
	}
	if old := k.keys(); old != nil {
		added, removed := kidDiff(old, set)
		if len(added)+len(removed) > 0 {
			k.log.Info("JWT signing keys changed", "source", k.source(), "added", added, "removed", removed)
		}
	}
	k.set.Store(set)
	k.expires.Store(now.Add(age).UnixNano())
	return nil
}

// fetch reads the set from its source and how long it may be kept; a nil
// set is a file unchanged since its last read.
func (k *keySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, time.Duration, error) {
	if f := k.cfg.JWKSFile; f != "" {
		st, err := os.Stat(f)
		if err != nil {
			return nil, 0, fmt.Errorf("auth.jwt.jwks_file: %w", err)
		}
		stamp := fmt.Sprintf("%d/%d", st.Size(), st.ModTime().UnixNano())
		if stamp == k.fileStamp {
			return nil, jwksFileAge, nil
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, 0, fmt.Errorf("auth.jwt.jwks_file: %w", err)
		}
		set, err := parseKeySet(b, "auth.jwt.jwks_file "+f)
		if err == nil {
			k.fileStamp = stamp
		}
		return set, jwksFileAge, err
	}
	uri, field := k.cfg.JWKSURI, "auth.jwt.jwks_uri"
	if k.cfg.Discovery {
		var err error
		if uri, err = k.discover(ctx); err != nil {
			return nil, 0, err
		}
		field = "jwks_uri of " + k.source()
	}
	b, hdr, err := k.get(ctx, uri)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", field, err)
	}
	set, err := parseKeySet(b, field+" "+uri)
	return set, k.maxAge(hdr), err
}

// discover reads the issuer's OpenID configuration for its jwks_uri, which
// must be https (or http to this machine, as the issuer may be) and whose
// issuer must be the configured one (OpenID Connect Discovery 1.0 §4.3).
func (k *keySet) discover(ctx context.Context) (string, error) {
	u := strings.TrimSuffix(k.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	b, _, err := k.get(ctx, u)
	if err != nil {
		return "", fmt.Errorf("auth.jwt.discovery: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("auth.jwt.discovery: %s is not an OpenID configuration: %w", u, err)
	}
	if doc.Issuer != k.cfg.Issuer {
		return "", fmt.Errorf("auth.jwt.discovery: %s names issuer %q, not auth.jwt.issuer %q", u, doc.Issuer, k.cfg.Issuer)
	}
	if doc.JWKSURI == "" {
		return "", fmt.Errorf("auth.jwt.discovery: %s has no jwks_uri; set auth.jwt.jwks_uri instead", u)
	}
	if errs := config.CheckFetchURL("jwks_uri", doc.JWKSURI); errs != nil {
		return "", fmt.Errorf("auth.jwt.discovery: %s: %w", u, errs)
	}
	return doc.JWKSURI, nil
}

func (k *keySet) get(ctx context.Context, u string) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(b) > jwksMaxBytes {
		return nil, nil, fmt.Errorf("GET %s: larger than %d bytes", u, jwksMaxBytes)
	}
	return b, resp.Header, nil
}

// maxAge is the answer's Cache-Control max-age, within [minRefresh, a day].
func (k *keySet) maxAge(h http.Header) time.Duration {
	age := jwksDefaultAge
	for _, d := range strings.Split(h.Get("Cache-Control"), ",") {
		d = strings.TrimSpace(strings.ToLower(d))
		if d == "no-store" || d == "no-cache" {
			age = 0
		}
		if v, ok := strings.CutPrefix(d, "max-age="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				age = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(age, k.minRefresh), jwksMaxAge)
}

// parseKeySet reads a JSON Web Key Set and keeps only public halves (the
// server never signs). Every key must be valid: a set that is half broken
// is not used, the last good one stays.
func parseKeySet(b []byte, where string) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: not a JSON Web Key Set: %w", where, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("%s: no keys", where)
	}
	for i, key := range set.Keys {
		if !key.Valid() {
			return nil, fmt.Errorf("%s: key %d (kid %q) is not valid", where, i, key.KeyID)
		}
		if !key.IsPublic() {
			set.Keys[i] = key.Public()
		}
	}
	return &set, nil
}

func kidDiff(old, cur *jose.JSONWebKeySet) (added, removed []string) {
	ids := func(s *jose.JSONWebKeySet) []string {
		out := make([]string, 0, len(s.Keys))
		for _, k := range s.Keys {
			out = append(out, k.KeyID)
		}
		return out
	}
	o, c := ids(old), ids(cur)
	for _, id := range c {
		if !slices.Contains(o, id) {
			added = append(added, id)
		}
	}
	for _, id := range o {
		if !slices.Contains(c, id) {
			removed = append(removed, id)
		}
	}
	return added, removed
}
