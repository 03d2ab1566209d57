// A backend plugin with a shutdown hook (backend.Shutdowner): it writes
// "shut down" to the file its configuration names, or, with hang set,
// never returns, so a test can see that the core calls the hook and that
// it bounds it.
package main

import (
	"context"
	"os"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// config is [plugins.shut.config]; the core refuses any other key.
type config struct {
	Marker string `json:"marker"`
	Hang   bool   `json:"hang"`
}

type shut struct{ cfg config }

func (shut) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"shut"}}, nil
}

func (shut) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true}, nil
}

func (s shut) Shutdown(ctx context.Context) error {
	if s.cfg.Hang {
		select {} // the core's deadline, then its kill, must end this
	}
	return os.WriteFile(s.cfg.Marker, []byte("shut down"), 0o600)
}

func main() {
	plugin.ServeBackend(plugin.Info{Name: "shut", Version: "0.0.1", Config: config{}}, func(_ host.Host, raw backend.Config) (backend.Backend, error) {
		var c config
		if err := raw.Decode(&c); err != nil {
			return nil, err
		}
		return shut{c}, nil
	})
}
