// Package hostroots holds the directories of the server's machine that
// sessions may copy files from and into ([volumes.host_roots]): the user's
// own data, whose bytes then never pass through the model. It says who may
// use each root, and opens it as a workspace.Files: paths beneath it only,
// no link followed anywhere (the root itself included), regular files
// only.
package hostroots

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Errors of Get; the engine refuses with them.
var (
	ErrUnknown  = errors.New("no such host root")
	ErrReadOnly = errors.New("the host root is read-only")
)

// Root is one allowed directory.
type Root struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	Writable bool   `json:"writable"`
	Claim    string `json:"-"` // the PersistentVolumeClaim pods mount it from; "": none
	Staged   string `json:"-"` // its read-only bind under the server's state (Stage); "": not staged
	tenants  []string
	files    *workspace.Files
	id       fileKey // what New found: a root replaced since is not mounted
}

// Files is the root's tree, opened with the workspace's rules.
func (r *Root) Files() *workspace.Files { return r.files }

// Roots are the configured roots.
type Roots struct {
	byName map[string]*Root
	local  string
}

// New checks each root: an existing directory, not a link. local names the
// client a root without tenants is for (stdio's, or an HTTP server's
// without tenants).
func New(cfg map[string]config.HostRoot, local string) (*Roots, error) {
	rs := &Roots{byName: map[string]*Root{}, local: local}
	for name, c := range cfg {
		st, err := os.Lstat(c.Path)
		switch {
		case err != nil:
			return nil, fmt.Errorf("volumes.host_roots.%s.path: %w", name, err)
		case st.Mode()&os.ModeSymlink != 0:
			return nil, fmt.Errorf("volumes.host_roots.%s.path: %s is a symbolic link: name the directory it points to", name, c.Path)
		case !st.IsDir():
			return nil, fmt.Errorf("volumes.host_roots.%s.path: %s is not a directory", name, c.Path)
		}
		id, _ := fileID(st)
		rs.byName[name] = &Root{Name: name, Path: c.Path, Writable: c.Writable, tenants: slices.Clone(c.Tenants), files: workspace.NewHostFiles(c.Path), id: id, Claim: c.Claim}
	}
	return rs, nil
}

func (rs *Roots) usable(r *Root, client string) bool {
	if len(r.tenants) == 0 {
		return client == rs.local
	}
	return slices.Contains(r.tenants, client)
}

// Get is root name for client, to write into when write. Another
// client's root is unknown to it, as one that does not exist.
func (rs *Roots) Get(client, name string, write bool) (*Root, error) {
	r, ok := rs.byName[name]
	if !ok || !rs.usable(r, client) {
		return nil, fmt.Errorf("%w %q (yours: %s)", ErrUnknown, name, rs.names(client))
	}
	if write && !r.Writable {
		return nil, fmt.Errorf("%w: %q may be read, not written (volumes.host_roots.%s.writable)", ErrReadOnly, name, name)
	}
	return r, nil
}

// For lists the roots client may use, by name.
func (rs *Roots) For(client string) []*Root {
	var out []*Root
	for _, r := range rs.byName {
		if rs.usable(r, client) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (rs *Roots) names(client string) string {
	var n []string
	for _, r := range rs.For(client) {
		n = append(n, r.Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
