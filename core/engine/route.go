package engine

import (
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/route"
)

// backends is what routing sees of the plugins.
func backends(sts []plugins.Status) []route.Backend {
	out := make([]route.Backend, len(sts))
	for i, st := range sts {
		out[i] = route.Backend{Name: st.Name, Version: st.Version, Capabilities: st.Capabilities, Error: st.Error}
	}
	return out
}

// pick chooses the backend for a request: the one it names, else the
// route. Errors are *RequestError.
func (e *Engine) pick(req Request) (string, error) {
	return e.router.Pick(backends(e.plugins.Statuses()), req.Language, req.Backend, req.SessionID)
}

// check is the start-up validation of the routing configuration against
// the loaded plugins (route.Router.Check, images by the policy).
func (e *Engine) check(sts []plugins.Status) error {
	return e.router.Check(backends(sts), e.pol.CheckImage)
}

// Check applies the start-up checks of New to plugin statuses (for doctor)
// and returns what each language would be routed to.
func Check(cfg config.Config, pol *policy.Policy, sts []plugins.Status) ([]route.Language, error) {
	r, bs := route.New(cfg), backends(sts)
	if err := r.Check(bs, pol.CheckImage); err != nil {
		return nil, err
	}
	return r.Languages(bs), nil
}

// Languages describes every language the loaded (or declared) backends
// serve, for tool generation.
func (e *Engine) Languages() []route.Language {
	return e.router.Languages(backends(e.plugins.Statuses()))
}

// LanguageName is how a language is written in messages: what its backends
// report, else its id.
func (e *Engine) LanguageName(language string) string {
	return route.LanguageName(backends(e.plugins.Statuses()), language)
}

func status(sts []plugins.Status, name string) (plugins.Status, bool) {
	for _, st := range sts {
		if st.Name == name {
			return st, true
		}
	}
	return plugins.Status{}, false
}
