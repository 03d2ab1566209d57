package forge

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/egress"
)

// network is the [network] policy and the channels that carry sandboxes'
// connections to the core's egress proxy (docs/network.md).
func network(cfg config.Config, rec audit.Recorder, log hclog.Logger) (*egress.Policy, *egress.Channels, error) {
	tenantCreds := map[string]map[string]config.Credential{}
	for name, t := range cfg.Tenants {
		if len(t.Credentials) > 0 {
			tenantCreds[name] = t.Credentials
		}
	}
	pol, err := egress.NewPolicy(cfg.Network, tenantCreds, rec)
	if err != nil {
		return nil, nil, fmt.Errorf("network: %w", err)
	}
	hosts := map[string]netip.Addr{}
	for name, a := range cfg.Network.Hosts {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, nil, fmt.Errorf("network.hosts[%q]: %w", name, err)
		}
		hosts[name] = addr.Unmap()
	}
	proxy := egress.New(egress.Options{Resolver: egress.HostsResolver{Hosts: hosts, Next: net.DefaultResolver}, Log: log})
	ch, err := egress.NewChannels(proxy, filepath.Join(cfg.Volumes.BasePath, "net"))
	if err != nil {
		return nil, nil, err
	}
	return pol, ch, nil
}
