// Package network is network by host name as the core wires it: the
// [network] policy (with the tenants' credentials), the per-run channels
// that carry sandboxes' connections to the egress proxy (docs/network.md),
// and doctor's check of the credentials.
package network

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/doctor"
	"github.com/mcp-forge/mcp-forge/core/egress"
	"github.com/mcp-forge/mcp-forge/core/egress/credential"
	"github.com/mcp-forge/mcp-forge/core/egress/proxy"
)

// New is the [network] policy and the channels that carry sandboxes'
// connections to the core's egress proxy, its channels under base_path.
func New(cfg config.Config, rec audit.Recorder, log hclog.Logger) (*egress.Policy, *egress.Channels, error) {
	pol, err := egress.NewPolicy(cfg.Network, tenantCredentials(cfg), rec)
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
	px := proxy.New(proxy.Options{Resolver: proxy.HostsResolver{Hosts: hosts, Next: net.DefaultResolver}, Log: log})
	ch, err := egress.NewChannels(px, filepath.Join(cfg.Volumes.BasePath, "net"))
	if err != nil {
		return nil, nil, err
	}
	return pol, ch, nil
}

// tenantCredentials are the [tenants.NAME.credentials] tables.
func tenantCredentials(cfg config.Config) map[string]map[string]config.Credential {
	out := map[string]map[string]config.Credential{}
	for name, t := range cfg.Tenants {
		if len(t.Credentials) > 0 {
			out[name] = t.Credentials
		}
	}
	return out
}

// CredentialsCheck: every credential's hosts are allowed and its value and
// ca_file readable now, as serve requires; and the bundle a sandbox gets
// holds this machine's trust store.
func CredentialsCheck(cfg config.Config) doctor.Check {
	return func(context.Context) []doctor.Result {
		n := len(cfg.Network.Credentials)
		for _, t := range cfg.Tenants {
			n += len(t.Credentials)
		}
		if n == 0 {
			return nil
		}
		if _, err := egress.NewPolicy(cfg.Network, tenantCredentials(cfg), discard{}); err != nil {
			return []doctor.Result{{Name: "credentials", Status: doctor.Fail, Detail: err.Error(),
				Fix: "serve refuses to start with this: fix the field it names (docs/network.md, Credentials added at egress)"}}
		}
		out := []doctor.Result{{Name: "credentials", Status: doctor.OK,
			Detail: fmt.Sprintf("%d configured, values readable, hosts allowed: %s", n, strings.Join(slices.Sorted(maps.Keys(cfg.Network.Credentials)), ", "))}}
		if !credential.HasSystemRoots() {
			out = append(out, doctor.Result{Name: "credentials", Status: doctor.Warn,
				Detail: "no system trust store was found (/etc/ssl/certs/ca-certificates.crt and the like): the CA bundle of a run with credentials holds only its own CA, so its HTTPS to other hosts fails",
				Fix:    "install ca-certificates on the core's machine, or set SSL_CERT_FILE for the server"})
		}
		return out
	}
}

// discard is an audit recorder for a policy that grants nothing.
type discard struct{}

func (discard) Record(audit.Entry) {}
