package httpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
)

func TestCheckBind(t *testing.T) {
	cases := []struct {
		addr        string
		auth, allow bool
		ok          bool
	}{
		{"127.0.0.1:3000", false, false, true},
		{"localhost:3000", false, false, true},
		{"[::1]:3000", false, false, true},
		{"0.0.0.0:3000", false, false, false},
		{":3000", false, false, false},
		{"192.0.2.10:3000", false, false, false},
		{"0.0.0.0:3000", true, false, true},
		{"0.0.0.0:3000", false, true, true},
		{"3000", true, false, false},
	}
	for _, c := range cases {
		err := CheckBind(c.addr, c.auth, c.allow)
		if (err == nil) != c.ok {
			t.Errorf("%s auth=%v allow=%v: %v", c.addr, c.auth, c.allow, err)
		}
		if err != nil && c.ok == false && !strings.Contains(err.Error(), "3000") {
			t.Errorf("%s: error does not name the address: %v", c.addr, err)
		}
	}
}

func TestChallengeOn401Only(t *testing.T) {
	for code, want := range map[int]bool{401: true, 403: false, 200: false} {
		rec := httptest.NewRecorder()
		withChallenge(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) })).ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
		if got := strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer "); got != want {
			t.Errorf("%d: challenge %q", code, rec.Header().Get("WWW-Authenticate"))
		}
	}
	// An existing challenge (resource metadata) is kept.
	rec := httptest.NewRecorder()
	withChallenge(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="x"`)
		w.WriteHeader(401)
	})).ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
	if rec.Header().Get("WWW-Authenticate") != `Bearer resource_metadata="x"` {
		t.Errorf("challenge replaced: %q", rec.Header().Get("WWW-Authenticate"))
	}
}

// The status recorder must keep SSE working: it flushes through.
func TestStatusWriterFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := &statusWriter{ResponseWriter: rec, code: 200}
	var _ http.Flusher = sw
	sw.WriteHeader(418)
	sw.Write([]byte("x"))
	sw.Flush()
	if !rec.Flushed || sw.code != 418 {
		t.Fatalf("flushed=%v code=%d", rec.Flushed, sw.code)
	}
}

func TestDoctor(t *testing.T) {
	cfg := config.Default()
	status := func(cfg config.Config, addr string) map[string]doctor.Status {
		out := map[string]doctor.Status{}
		for _, r := range Doctor(cfg, addr)(context.Background()) {
			out[r.Name] = r.Status
		}
		return out
	}
	if s := status(cfg, "127.0.0.1:3000"); s["http"] != doctor.OK || len(s) != 1 {
		t.Errorf("loopback, no tenants: %v", s)
	}
	if s := status(cfg, "0.0.0.0:3000"); s["http"] != doctor.Fail || s["tls"] != doctor.Warn {
		t.Errorf("public, no tenants: %v", s)
	}
	cfg.Tenants["alice"] = config.Tenant{APIKeySHA256: []string{strings.Repeat("a", 64)}}
	cfg.Server.TLSCert, cfg.Server.TLSKey = "/nonexistent/c.pem", "/nonexistent/k.pem"
	if s := status(cfg, "0.0.0.0:3000"); s["http"] != doctor.OK || s["tls"] != doctor.Fail {
		t.Errorf("public, tenants, missing cert: %v", s)
	}
}
