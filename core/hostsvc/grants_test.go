package hostsvc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/toolbridge"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// A container intent naming a tool grant the core did not issue to this
// plugin is refused as a policy error and audited with the rule, before
// any workspace or container exists.
func TestCreateRefusesForeignGrant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grants GrantFunc
		want   string
	}{
		{"no bridge", nil, "serves no tool grants"},
		{"not issued to this plugin", func(owner, token string) (*toolbridge.Grant, error) {
			return nil, errors.New("tools grant " + token + " is not one the core issued to plugin " + owner)
		}, "not one the core issued to plugin python"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rec{}
			h := New("python", nil, r, nil) // no sandbox or workspaces: the refusal comes first
			if tc.grants != nil {
				h.SetGrants(tc.grants)
			}
			_, err := h.Create(context.Background(), host.Intent{Image: "x", ToolsGrant: "abc"})
			var he *host.Error
			if !errors.As(err, &he) || he.Kind != host.KindPolicy || !strings.Contains(he.Message, tc.want) {
				t.Fatalf("got %v", err)
			}
			if len(r.e) != 1 || r.e[0].Event != audit.SecurityViolation || r.e[0].Details["rule"] != toolbridge.RuleNotGranted {
				t.Fatalf("audit %+v", r.e)
			}
		})
	}
}
