package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A streamable HTTP server gets the configured headers on every request;
// the header's value never shows in a result or an error.
func TestHTTPServerWithHeaders(t *testing.T) {
	const token = "Bearer http-secret-token-31337"
	var denied atomic.Int64
	srv := mcp.NewServer(&mcp.Implementation{Name: "httpserver", Version: "1.0.0"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: obj()}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "authorized with " + req.Extra.Header.Get("Authorization")}}}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != token {
			denied.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after the bridge closes its session (cleanups run last first)

	b := newTestBridge(t, map[string]ServerConfig{
		"web":     {URL: ts.URL, Headers: map[string]string{"Authorization": token}},
		"nocreds": {URL: ts.URL},
	}, "10s")
	r := call(t, b, "web", "whoami", nil)
	if r.IsError || r.Text != "authorized with [redacted]" {
		t.Fatalf("want the call authorized and the token redacted: %+v", r)
	}
	r = call(t, b, "nocreds", "whoami", nil)
	if !r.IsError || !strings.Contains(r.Message, "MCP server nocreds is down") || denied.Load() == 0 {
		t.Fatalf("a server without the header: %+v", r)
	}
}

func obj() map[string]any { return map[string]any{"type": "object"} }

// server-everything over streamable HTTP.
func TestEverythingOverHTTP(t *testing.T) {
	script := npmServer(t, "server-everything")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(nodePath(t), script, "streamableHttp")
	cmd.Env = []string{"PORT=" + fmt.Sprint(port), "PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	eventually(t, 20*time.Second, "server-everything listens", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	b := newTestBridge(t, map[string]ServerConfig{"everything": {URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}}, "20s")
	if r := call(t, b, "everything", "get_sum", map[string]any{"a": 2, "b": 3}); r.IsError || !strings.Contains(r.Text, "5") {
		t.Fatalf("%+v", r)
	}
}
