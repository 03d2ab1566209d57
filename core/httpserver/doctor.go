package httpserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/tenant"
)

// Doctor checks what `serve --http addr` would refuse or warn about:
// authentication for the bind address, TLS files, the JWT signing keys.
func Doctor(cfg config.Config, addr string) doctor.Check {
	return func(ctx context.Context) []doctor.Result {
		reg := tenant.New(cfg)
		jwt := cfg.Auth.JWT.Enabled()
		var out []doctor.Result
		auth := "no authentication (one implicit tenant)"
		if reg.Authenticated() || jwt {
			kinds := []string{}
			if reg.Authenticated() {
				kinds = append(kinds, "API keys")
			}
			if jwt {
				kinds = append(kinds, "JWTs from "+cfg.Auth.JWT.Issuer)
			}
			auth = fmt.Sprintf("%d tenant(s): %s; %s", len(cfg.Tenants), strings.Join(reg.Names(), ", "), strings.Join(kinds, " and "))
		}
		if err := CheckBind(addr, reg.Authenticated() || jwt, cfg.Server.AllowUnauthenticated); err != nil {
			out = append(out, doctor.Result{Name: "http", Status: doctor.Fail, Detail: addr + ": " + auth,
				Fix: "add [tenants.NAME] with api_key_sha256 (`mcp-forge tenant new-key`), bind to 127.0.0.1, or set server.allow_unauthenticated = true"})
		} else {
			st := doctor.OK
			if !reg.Authenticated() && !jwt && !IsLoopbackAddr(addr) {
				st = doctor.Warn // allowed by the override
			}
			out = append(out, doctor.Result{Name: "http", Status: st, Detail: addr + ": " + auth})
		}
		if cfg.Server.TLSCert != "" {
			if _, err := tls.LoadX509KeyPair(cfg.Server.TLSCert, cfg.Server.TLSKey); err != nil {
				out = append(out, doctor.Result{Name: "tls", Status: doctor.Fail, Detail: err.Error(), Fix: "point server.tls_cert and server.tls_key at a PEM certificate and its key"})
			} else {
				out = append(out, doctor.Result{Name: "tls", Status: doctor.OK, Detail: cfg.Server.TLSCert})
			}
		} else if !IsLoopbackAddr(addr) {
			out = append(out, doctor.Result{Name: "tls", Status: doctor.Warn, Detail: "plain HTTP on a non-loopback address: keys and code travel in clear",
				Fix: "set server.tls_cert and server.tls_key, or terminate TLS in a proxy and bind to 127.0.0.1"})
		}
		if jwt {
			if j, err := tenant.NewJWT(ctx, cfg.Auth.JWT, nil); err != nil {
				out = append(out, doctor.Result{Name: "jwks", Status: doctor.Fail, Detail: err.Error(),
					Fix: "point auth.jwt.jwks_file at the issuer's JSON Web Key Set, or auth.jwt.jwks_uri at its URL (or set discovery = true), and check the issuer answers from here"})
			} else {
				out = append(out, doctor.Result{Name: "jwks", Status: doctor.OK, Detail: j.Source()})
			}
		}
		return out
	}
}

// IsLoopbackAddr is IsLoopback for a host:port.
func IsLoopbackAddr(addr string) bool {
	host := addr
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		host = addr[:i]
	}
	return config.IsLoopbackHost(host)
}
