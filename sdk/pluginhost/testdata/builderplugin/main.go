// A builder plugin whose plan key hashes the spec and whose build reports
// one step per package: it shows that a builder binary launches, streams
// progress and returns its lock through pluginhost.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

type b struct{}

func (b) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	if err := r.Validate(); err != nil {
		return builder.Plan{}, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%q %q %q", r.Language, r.BaseImage, r.Packages))
	return builder.Plan{CacheKey: "sha256:" + hex.EncodeToString(sum[:]), Packages: r.Packages}, nil
}

func (x b) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	p, err := x.Plan(ctx, r.Spec)
	if err != nil {
		return builder.BuildResult{}, err
	}
	res := builder.BuildResult{CacheKey: p.CacheKey, Dir: "env"}
	for i, pk := range p.Packages {
		progress(builder.Progress{Phase: "install", Step: i + 1, Steps: len(p.Packages), Message: pk.Name})
		sum := sha256.Sum256([]byte(pk.Name))
		res.Lock = append(res.Lock, builder.Locked{Name: pk.Name, Version: "1.0.0", Hashes: []string{"sha256:" + hex.EncodeToString(sum[:])}})
	}
	return res, nil
}

func main() {
	plugin.ServeBuilder(plugin.Info{Name: "testbuilder", Version: "0.2.0"}, func(host.Host, backend.Config) (builder.Builder, error) { return b{}, nil })
}
