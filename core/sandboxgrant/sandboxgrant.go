// Package sandboxgrant holds what the core grants one run's or session's
// sandbox beyond the defaults every sandbox gets: host roots mounted
// read-only ([volumes.host_roots], execute_*'s host_roots) and an
// isolation its tenant requires (tenants.NAME.isolation). A grant is
// issued to the plugin that runs the code; its token travels through the
// plugin (host.Intent.SandboxGrant), the paths and the isolation never
// do: the core resolves the token when the container is created
// (core/hostsvc).
package sandboxgrant

import (
	"fmt"
	"path"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// RuleNotGranted is the violation of a container intent naming a sandbox
// grant that is not a live one of its plugin's.
const RuleNotGranted = "sandbox-not-granted"

// ruleEnded ends a grant with its run or session.
const ruleEnded = "sandbox-grant-ended"

// Spec is what a grant gives a sandbox.
type Spec struct {
	Roots     []*hostroots.Root // mounted read-only at Target/<name>
	Target    string            // host.RootsDir
	Isolation string            // the isolation the sandbox runs under at least; "": the server's
}

// Grant is one run's or session's grant.
type Grant struct {
	life  *grant.Grant // ended with its run or session
	token string
	spec  Spec

	mu      sync.Mutex
	mounted int
}

// Registry holds the live grants by token.
type Registry struct {
	live grant.Tokens[*Grant]
}

// New is an empty registry.
func New() *Registry { return &Registry{} }

// Issue grants s to plugin. Each root is checked unchanged first.
func (r *Registry) Issue(plugin string, s Spec) (*Grant, error) {
	for _, root := range s.Roots {
		if err := root.Unchanged(); err != nil {
			return nil, err
		}
	}
	g := &Grant{life: grant.New(grant.Config{}), token: grant.NewToken(), spec: s}
	r.live.Put(g.token, plugin, g)
	return g, nil
}

// Lookup is the live grant token issued to plugin (hostsvc's lookup):
// another plugin's, an ended one or an unknown one are refused alike.
func (r *Registry) Lookup(plugin, token string) (*Grant, error) {
	g, ok := r.live.Lookup(plugin, token)
	if !ok || g.life.Err() != nil {
		return nil, fmt.Errorf("no live sandbox grant %q of plugin %s", grant.Cut(token), plugin)
	}
	return g, nil
}

// Close ends g (nil: none): no container is created with it any more
// (those created keep what they were given until removed).
func (r *Registry) Close(g *Grant) {
	if g == nil {
		return
	}
	g.life.End(ruleEnded)
	r.live.Remove(g.token)
}

// Token is what the plugin copies into its container's intent.
func (g *Grant) Token() string { return g.token }

// Isolation is what the grant's sandboxes run under at least ("": the
// server's).
func (g *Grant) Isolation() string { return g.spec.Isolation }

// Names are the granted roots' names.
func (g *Grant) Names() []string {
	n := make([]string, len(g.spec.Roots))
	for i, r := range g.spec.Roots {
		n[i] = r.Name
	}
	return n
}

// Target is where root name appears in the sandbox.
func (g *Grant) Target(name string) string { return path.Join(g.spec.Target, name) }

// Mounts are the grant's read-only bind mounts of its roots, each checked
// unchanged again: the container is created right after. It counts as a
// container created with the grant.
func (g *Grant) Mounts() ([]runtime.Mount, error) {
	var out []runtime.Mount
	for _, r := range g.spec.Roots {
		if err := r.Unchanged(); err != nil {
			return nil, err
		}
		out = append(out, runtime.Mount{Source: r.MountSource(), Target: g.Target(r.Name), ReadOnly: true, HostRoot: true, Claim: r.Claim})
	}
	g.mu.Lock()
	g.mounted++
	g.mu.Unlock()
	return out, nil
}

// Mounted is how many containers were created with the grant.
func (g *Grant) Mounted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mounted
}
