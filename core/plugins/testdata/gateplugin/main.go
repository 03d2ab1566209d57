// A backend plugin whose configuration blocks until a gate file exists, so a
// test can hold one plugin mid-start and check that the manager still
// answers for everything else.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type gated struct{}

func (gated) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"gate"}}, nil
}

func (gated) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true}, nil
}

func main() {
	plugin.ServeBackend(plugin.Info{Name: "gate", Version: "0.0.1"}, func(_ host.Host, cfg backend.Config) (backend.Backend, error) {
		var c struct{ Gate string }
		if err := json.Unmarshal(cfg, &c); err != nil || c.Gate == "" {
			return nil, errors.New("config needs gate")
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(c.Gate); err == nil {
				return gated{}, nil
			}
		}
		return nil, errors.New("gate never opened")
	})
}
