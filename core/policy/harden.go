package policy

import (
	"maps"
	"strings"
	"sync"
)

// Intent is what a caller may choose about a container. Everything else is
// fixed by Harden: there is no way to ask for privileges, capabilities,
// devices, host namespaces or arbitrary host paths.
type Intent struct {
	Name      string
	Image     string
	Command   []string
	Env       map[string]string
	WorkDir   string
	Labels    map[string]string // keys get the io.mcp-forge. prefix if missing
	Mounts    []Mount           // host sources inside volumes.base_path
	Limits    Limits            // already resolved by ResolveLimits
	SessionID string
	Workspace string // the workspace directory's name; SessionID if empty
	Owner     string
	Instance  string
}

// Harden turns an intent into a full spec with every required setting, then
// checks it: a bug here is caught by CheckCreate rather than run.
func (p *Policy) Harden(in Intent) (Spec, error) {
	labels := map[string]string{}
	for k, v := range in.Labels {
		if !strings.HasPrefix(k, "io.mcp-forge.") {
			k = "io.mcp-forge." + k
		}
		labels[k] = v
	}
	labels[LabelManaged] = "true"
	labels[LabelInstance] = in.Instance
	labels[LabelOwner] = in.Owner
	if in.SessionID != "" {
		labels[LabelSession] = in.SessionID
	}
	network := "none"
	userns := p.s.UserNS
	if userns == "host" {
		userns = ""
	}
	s := Spec{
		Name:            in.Name,
		Image:           in.Image,
		Command:         in.Command,
		Env:             maps.Clone(in.Env),
		WorkDir:         in.WorkDir,
		Labels:          labels,
		User:            p.s.User,
		Network:         network,
		ReadOnlyRoot:    true,
		TmpfsSize:       p.s.TmpfsMax,
		NoNewPrivileges: true,
		SeccompProfile:  p.s.Seccomp,
		CapDrop:         []string{"ALL"},
		UserNS:          userns,
		UserNSStart:     p.s.UserNSStart,
		Mounts:          in.Mounts,
		Init:            true,
		Limits:          in.Limits,
		SessionID:       in.SessionID,
		Workspace:       in.Workspace,
		Owner:           in.Owner,
	}
	return s, p.CheckCreate(s)
}

// Tracker is the set of containers this forge instance created, with the
// plugin that owns each. Only tracked containers may be touched, and only by
// their owner.
type Tracker struct {
	mu     sync.Mutex
	owners map[string]string
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{owners: map[string]string{}} }

// Add records a container created for owner.
func (t *Tracker) Add(id, owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.owners[id] = owner
}

// Remove forgets a container.
func (t *Tracker) Remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.owners, id)
}

// Check refuses an operation on a container that is not ours or not owner's.
// The core itself passes owner "" to act on any container it created.
func (t *Tracker) Check(id, owner, op string) error {
	t.mu.Lock()
	o, ok := t.owners[id]
	t.mu.Unlock()
	if !ok {
		return violation("not-our-container", "cannot %s container %q: it was not created by this forge instance", op, short(id))
	}
	if owner != "" && o != owner {
		return violation("not-owner", "cannot %s container %q: it belongs to plugin %q, not %q", op, short(id), o, owner)
	}
	return nil
}

// IDs lists tracked containers.
func (t *Tracker) IDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.owners))
	for id := range t.owners {
		out = append(out, id)
	}
	return out
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
