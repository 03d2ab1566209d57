package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/httpserver"
	"github.com/mcp-forge/mcp-forge/core/runtime/podman"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/core/version"
)

// httpAddress is where to serve HTTP: --http wins, else server.transport =
// "http" with server.host:server.port; stdio otherwise.
func httpAddress(cfg config.Config) (string, bool) {
	if httpAddr != "" {
		return httpAddr, true
	}
	if cfg.Server.Transport == "http" {
		return net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port)), true
	}
	return "", false
}

func serveHTTP(ctx context.Context, cfg config.Config, addr string, log hclog.Logger) int {
	// Refuse an unauthenticated public bind before starting anything.
	if err := httpserver.CheckBind(addr, tenant.New(cfg).Authenticated() || cfg.Auth.JWT.JWKSFile != "", cfg.Server.AllowUnauthenticated); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	f, err := forge.New(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", "error", err)
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	defer f.Close()
	srv, err := httpserver.New(f, podman.New(cfg.Server.PodmanSocket), addr, log.Named("http"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	log.Info("starting", "version", version.Version, "plugins", strings.Join(f.Plugins.Names(), ","))
	err = srv.Serve(ctx, func(mainAddr, adminAddr string) {
		// One machine-readable line on stderr for supervisors and tests
		// that bind port 0.
		fmt.Fprintf(os.Stderr, "mcp-forge: listening on %s (admin %s)\n", mainAddr, adminAddr)
	})
	if err != nil {
		log.Error("HTTP server failed", "error", err)
		fmt.Fprintln(os.Stderr, "mcp-forge:", err)
		return 1
	}
	return 0
}

func cmdTenant(_ context.Context, args []string) int {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "new-key":
		key, hash, err := tenant.NewKey()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mcp-forge:", err)
			return 1
		}
		fmt.Printf("key:    %s\nsha256: %s\n\n", key, hash)
		fmt.Println("Give the key to the tenant (it is shown once); put only the sha256 in forge.toml:")
		fmt.Printf("  [tenants.NAME]\n  api_key_sha256 = [%q]\n", hash)
		return 0
	case "hash-key":
		fmt.Fprintln(os.Stderr, "reading the key from stdin (one line)")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		key := strings.TrimRight(line, "\r\n")
		if key == "" {
			fmt.Fprintln(os.Stderr, "mcp-forge tenant hash-key: no key on stdin:", err)
			return 1
		}
		fmt.Println(tenant.HashKey(key))
		return 0
	}
	fmt.Fprintln(os.Stderr, "usage: mcp-forge tenant new-key | hash-key   (hash-key reads the key on stdin, so it stays out of shell history)")
	return 2
}
