// A plugin whose Execute prints the environment variable named by the code:
// it shows what of the core's environment reaches a plugin.
package main

import (
	"context"
	"os"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type env struct{}

func (env) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"env"}}, nil
}

func (env) Execute(_ context.Context, r backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true, Stdout: os.Getenv(r.Code)}, nil
}

func main() {
	plugin.ServeBackend(plugin.Info{Name: "env", Version: "0.1.0"}, func(host.Host, backend.Config) (backend.Backend, error) { return env{}, nil })
}
