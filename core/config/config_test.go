package config

import (
	"strings"
	"testing"
)

func TestMaskedPrint(t *testing.T) {
	cfg := Default()
	cfg.MCPTools["gh"] = MCPTool{Command: "gh", Args: []string{"--token", "abc"}, Env: map[string]string{"GITHUB_TOKEN": "topsecret", "MODE": "plainvalue"}}
	cfg.MCPTools["web"] = MCPTool{URL: "https://x.example/mcp", Headers: map[string]string{"X-Whatever": "headersecret"}}
	out, err := Render(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Every env and header value is the bridge's secret, whatever its name.
	for _, s := range []string{"topsecret", "plainvalue", "headersecret"} {
		if strings.Contains(out, s) {
			t.Fatalf("%s printed:\n%s", s, out)
		}
	}
	if !strings.Contains(out, `MODE = "***"`) || !strings.Contains(out, `X-Whatever = "***"`) {
		t.Fatalf("masked keys missing:\n%s", out)
	}
}
