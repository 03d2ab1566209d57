// A builder plugin: this core loads only backends, and must refuse it with
// a clear error.
package main

import (
	"context"
	"errors"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type b struct{}

func (b) Plan(context.Context, builder.PlanRequest) (builder.Plan, error) {
	return builder.Plan{}, errors.New("not a real builder")
}

func (b) Build(context.Context, builder.BuildRequest, func(builder.Progress)) (builder.BuildResult, error) {
	return builder.BuildResult{}, errors.New("not a real builder")
}

func main() {
	plugin.ServeBuilder(plugin.Info{Name: "builder", Version: "0.1.0"}, func(host.Host, backend.Config) (builder.Builder, error) { return b{}, nil })
}
