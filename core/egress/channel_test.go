package egress

import (
	"context"
	"slices"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit/audittest"
	"github.com/mcp-forge/mcp-forge/core/config"
)

// The proxy variables replace the user's, and no_proxy cannot send code
// around the forwarder.
func TestChannelEnv(t *testing.T) {
	p, err := NewPolicy(network(func(n *config.Network) { n.AllowedHosts = []string{"files.test:8080", "other.test:8080"} }), nil, &audittest.Recorder{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.Grant(context.Background(), Request{Hosts: []string{"files.test", "other.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ch := &Channel{g: g}
	env := ch.Env(map[string]string{"HTTP_PROXY": "http://evil:1", "no_proxy": "*", "NO_PROXY": "*", "KEEP": "1"})
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		if env[k] != "http://127.0.0.1:3128" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if _, ok := env["no_proxy"]; ok || env["NO_PROXY"] != "" || env["KEEP"] != "1" {
		t.Errorf("env: %v", env)
	}
	h := "8080"
	if env[EnvHosts] != "files.test:"+h+",other.test:"+h {
		t.Errorf("%s = %q", EnvHosts, env[EnvHosts])
	}
	cmd := Command("/forge/agent/mcp-forge-agent", []string{"python3", "run.py"})
	if want := []string{"/forge/agent/mcp-forge-agent", "forward", SandboxDir + "/" + SocketName, "3128", "--", "python3", "run.py"}; !slices.Equal(cmd, want) {
		t.Errorf("command: %q", cmd)
	}
}
