package hostroots

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"syscall"

	"github.com/mcp-forge/mcp-forge/core/grant"
	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// Rules of the violations around a roots grant.
const (
	// RuleNotGranted: a container intent names a roots grant that is not
	// a live one of its plugin's.
	RuleNotGranted = "host-root-not-granted"
	// RuleChanged: a root is no longer what the server checked at start.
	RuleChanged = "host-root-changed"
	// RuleUnknown: a root that does not exist or is not the caller's.
	RuleUnknown = "host-root"
)

// ErrChanged: a root is no longer the directory the server checked at
// start (replaced, by a link say); nothing is mounted from it.
var ErrChanged = errors.New("the host root changed since the server started")

// Grant is the roots one run or session mounts read-only, issued to the
// plugin whose container mounts them: the token travels through the
// plugin (host.Intent.RootsGrant), the paths never do.
type Grant struct {
	life          *grant.Grant // ended with its run or session
	token, plugin string
	roots         []*Root
	target        string

	mu      sync.Mutex
	mounted int
}

// ruleEnded ends a roots grant with its run or session.
const ruleEnded = "host-root-grant-ended"

// grants are the live grants by token.
type grants struct {
	mu    sync.Mutex
	byTok map[string]*Grant
}

// Issue grants roots to plugin, mounted at target/<name> (host.RootsDir).
// Each root is checked unchanged first.
func (rs *Roots) Issue(plugin, target string, roots []*Root) (*Grant, error) {
	for _, r := range roots {
		if err := r.unchanged(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("a roots grant's token: %w", err)
	}
	g := &Grant{life: grant.New(grant.Config{}), token: hex.EncodeToString(b), plugin: plugin, roots: roots, target: target}
	rs.grants.mu.Lock()
	defer rs.grants.mu.Unlock()
	if rs.grants.byTok == nil {
		rs.grants.byTok = map[string]*Grant{}
	}
	rs.grants.byTok[g.token] = g
	return g, nil
}

// Lookup is the live grant token issued to plugin (hostsvc's GrantFunc):
// another plugin's, an ended one or an unknown one are refused alike.
func (rs *Roots) Lookup(plugin, token string) (*Grant, error) {
	rs.grants.mu.Lock()
	g := rs.grants.byTok[token]
	rs.grants.mu.Unlock()
	if g == nil || g.plugin != plugin || g.life.Err() != nil {
		return nil, fmt.Errorf("no live host-roots grant %q of plugin %s", cut(token), plugin)
	}
	return g, nil
}

// Close ends the grant: no container is created with it any more (those
// created keep their mounts until removed).
func (rs *Roots) Close(g *Grant) {
	if g == nil {
		return
	}
	g.life.End(ruleEnded)
	rs.grants.mu.Lock()
	delete(rs.grants.byTok, g.token)
	rs.grants.mu.Unlock()
}

// Token is what the plugin copies into its container's intent.
func (g *Grant) Token() string { return g.token }

// Names are the granted roots' names.
func (g *Grant) Names() []string {
	n := make([]string, len(g.roots))
	for i, r := range g.roots {
		n[i] = r.Name
	}
	return n
}

// Target is where root name appears in the sandbox.
func (g *Grant) Target(name string) string { return path.Join(g.target, name) }

// Mounts are the grant's read-only bind mounts, each root checked
// unchanged again: the container is created right after.
func (g *Grant) Mounts() ([]runtime.Mount, error) {
	var out []runtime.Mount
	for _, r := range g.roots {
		if err := r.unchanged(); err != nil {
			return nil, err
		}
		out = append(out, runtime.Mount{Source: r.Path, Target: g.Target(r.Name), ReadOnly: true, HostRoot: true, Claim: r.Claim})
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

// unchanged checks that r's path is still the directory New checked: not
// a link, the same device and inode.
func (r *Root) unchanged() error {
	st, err := os.Lstat(r.Path)
	if err != nil {
		return fmt.Errorf("%w: %q (%s): %v", ErrChanged, r.Name, r.Path, err)
	}
	if st.Mode()&os.ModeSymlink != 0 || !st.IsDir() {
		return fmt.Errorf("%w: %q (%s) is no longer a directory but %s: nothing is mounted from it; restore the directory and restart the server", ErrChanged, r.Name, r.Path, st.Mode().Type())
	}
	if id, ok := fileID(st); ok && r.id != (fileKey{}) && id != r.id {
		return fmt.Errorf("%w: %q (%s) is another directory than the one checked at start (replaced): nothing is mounted from it; restart the server to accept it", ErrChanged, r.Name, r.Path)
	}
	return nil
}

type fileKey struct{ dev, ino uint64 }

func fileID(st os.FileInfo) (fileKey, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{uint64(s.Dev), s.Ino}, true
}

func cut(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
