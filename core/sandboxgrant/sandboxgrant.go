// Package sandboxgrant holds what the core grants one run's or session's
// sandbox beyond the defaults every sandbox gets: host roots mounted
// read-only ([volumes.host_roots], execute_*'s host_roots) and an
// isolation its tenant requires (tenants.NAME.isolation). A grant is
// issued to the plugin that runs the code; its token travels through the
// plugin (host.Intent.SandboxGrant), the paths and the isolation never
// do: the core resolves the token when the container is created
// (core/hostsvc).
//
// A grant that asks only for an isolation has a standing twin: one grant
// per plugin and isolation, the same token for every run of that class
// and never ended, with which the plugin keeps pooled containers of the
// class; a pooled one serves a run once the core gives it to the run's own
// grant (Claim). So a tenant held to gVisor gets warm sandboxes too, and
// the run's grant still tells which containers ran its code.
package sandboxgrant

import (
	"fmt"
	"path"
	"slices"
	"sync"

	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/hostroots"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// RuleNotGranted is the violation of a container intent naming a sandbox
// grant that is not a live one of its plugin's.
const RuleNotGranted = "sandbox-not-granted"

// RuleClaim is the violation of a claim of a pooled container the core
// refuses: not created with a standing grant of the run's class, or claimed
// already.
const RuleClaim = "sandbox-claim"

// ruleEnded ends a grant with its run or session.
const ruleEnded = "sandbox-grant-ended"

// Spec is what a grant gives a sandbox.
type Spec struct {
	Roots     []*hostroots.Root // mounted read-only at Target/<name>
	Target    string            // host.RootsDir
	Isolation string            // the isolation the sandbox runs under at least; "": the server's
}

// Grant is one run's or session's grant, or a standing one.
type Grant struct {
	life  *grant.Grant // ended with its run or session
	token string
	spec  Spec
	// pool is the standing grant of this grant's class (nil: none, the
	// grant holds roots); standing marks a standing grant itself.
	pool     *Grant
	standing bool

	mu sync.Mutex
	// containers were created with the grant or claimed for it.
	containers []string
}

// Registry holds the live grants by token.
type Registry struct {
	live grant.Tokens[*Grant]

	mu       sync.Mutex
	standing map[[2]string]*Grant // by plugin and isolation
}

// New is an empty registry.
func New() *Registry { return &Registry{standing: map[[2]string]*Grant{}} }

// Issue grants s to plugin. Each root is checked unchanged first.
func (r *Registry) Issue(plugin string, s Spec) (*Grant, error) {
	for _, root := range s.Roots {
		if err := root.Unchanged(); err != nil {
			return nil, err
		}
	}
	g := &Grant{life: grant.New(grant.Config{}), token: grant.NewToken(), spec: s}
	if len(s.Roots) == 0 && s.Isolation != "" {
		g.pool = r.standingGrant(plugin, s)
	}
	r.live.Put(g.token, plugin, g)
	return g, nil
}

// standingGrant is plugin's standing grant of s's class, issued on first use.
func (r *Registry) standingGrant(plugin string, s Spec) *Grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{plugin, s.Isolation}
	if g := r.standing[k]; g != nil {
		return g
	}
	g := &Grant{life: grant.New(grant.Config{}), token: grant.NewToken(), spec: Spec{Target: s.Target, Isolation: s.Isolation}, standing: true}
	r.standing[k] = g
	r.live.Put(g.token, plugin, g)
	return g
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
	if g == nil || g.standing {
		return
	}
	g.life.End(ruleEnded)
	r.live.Remove(g.token)
}

// Token is what the plugin copies into its container's intent.
func (g *Grant) Token() string { return g.token }

// PoolToken is the token of the standing grant of g's class, with which
// the plugin may keep pooled containers for runs like g's ("": none, g
// holds roots or nothing beyond the defaults).
func (g *Grant) PoolToken() string {
	if g.pool == nil {
		return ""
	}
	return g.pool.token
}

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
// unchanged again: the container is created right after.
func (g *Grant) Mounts() ([]runtime.Mount, error) {
	var out []runtime.Mount
	for _, r := range g.spec.Roots {
		if err := r.Unchanged(); err != nil {
			return nil, err
		}
		out = append(out, runtime.Mount{Source: r.MountSource(), Target: g.Target(r.Name), ReadOnly: true, HostRoot: true, Claim: r.Claim})
	}
	return out, nil
}

// Created records container id as created with g (a standing grant's are
// not kept: they are claimed, one by one, by the runs they serve).
func (g *Grant) Created(id string) {
	if g.standing {
		return
	}
	g.mu.Lock()
	g.containers = append(g.containers, id)
	g.mu.Unlock()
}

// Mounted is how many containers were created with the grant or claimed
// for it.
func (g *Grant) Mounted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.containers)
}

// Holds reports whether container id was created with g or claimed for it.
func (g *Grant) Holds(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return id != "" && slices.Contains(g.containers, id)
}

// Claim gives container id, created with grant from (nil: none) and never
// claimed before (claimed), to g: only a pooled container of g's class,
// created with g's standing grant. The caller records the claim.
func (g *Grant) Claim(id string, from *Grant, claimed bool) error {
	switch {
	case g.standing:
		return fmt.Errorf("container %s: a standing grant is claimed for, never claims", id)
	case g.pool == nil:
		return fmt.Errorf("container %s: this grant holds host roots or nothing to pool, so no pooled container may serve its run (create one with the grant)", id)
	case from != g.pool:
		return fmt.Errorf("container %s was not created with the standing grant of this run's class (isolation %q): create one with the run's grant", id, g.spec.Isolation)
	case claimed:
		return fmt.Errorf("container %s was claimed already: a pooled container serves one run", id)
	}
	g.Created(id)
	return nil
}
