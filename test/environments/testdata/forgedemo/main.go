// forgedemo is a small but real builder plugin for the end-to-end tests of
// custom environments: it speaks the builder protocol over go-plugin like
// any builder, and instead of fetching from an index it writes each
// requested package as a tiny Python module into its layer. Some names
// behave specially, so the tests can reach every path of the core:
//
//	slowpkg  reports progress, then waits until the build is cancelled
//	bigpkg   adds 4 MiB of incompressible bytes (oversize images)
//
// Every Build call is appended to calls.log in its work directory (the
// directory the core starts it in), so a test can prove a refused request
// never reached the builder.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

const sitePackages = "usr/local/lib/python3.11/dist-packages"

type demo struct{ workDir string }

func names(ps []builder.Package) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+p.Version)
	}
	sort.Strings(out)
	return out
}

func (d *demo) log(line string) {
	f, err := os.OpenFile(filepath.Join(d.workDir, "calls.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

func (d *demo) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	if err := r.Validate(); err != nil {
		return builder.Plan{}, err
	}
	if r.BaseImageID == "" {
		return builder.Plan{}, errors.New("no base image id")
	}
	sum := sha256.Sum256([]byte(r.BaseImageID + "\n" + strings.Join(names(r.Packages), "\n")))
	return builder.Plan{CacheKey: hex.EncodeToString(sum[:]), Packages: r.Packages, Steps: []string{"resolve", "fetch"}}, nil
}

func module(name string) string { return strings.ReplaceAll(strings.ToLower(name), "-", "_") }

func (d *demo) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	d.log("build " + strings.Join(names(r.Spec.Packages), " "))
	progress(builder.Progress{Phase: "resolve", Step: 1, Message: fmt.Sprintf("%d packages", len(r.Spec.Packages))})
	final := filepath.Join("layers", r.CacheKey)
	if _, err := os.Stat(filepath.Join(d.workDir, final)); err == nil {
		return d.result(r, final)
	}
	tmp := filepath.Join(d.workDir, "partial-"+r.BuildID)
	// A build that does not finish leaves nothing behind.
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	for i, p := range r.Spec.Packages {
		progress(builder.Progress{Phase: "fetch", Step: 2, Message: fmt.Sprintf("%d of %d: %s", i+1, len(r.Spec.Packages), p.Name)})
		dir := filepath.Join(tmp, sitePackages, module(p.Name))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return builder.BuildResult{}, err
		}
		src := fmt.Sprintf("NAME = %q\nVERSION = \"1.0.0\"\n", p.Name)
		if err := os.WriteFile(filepath.Join(dir, "__init__.py"), []byte(src), 0o644); err != nil {
			return builder.BuildResult{}, err
		}
		switch p.Name {
		case "slowpkg":
			<-ctx.Done()
			return builder.BuildResult{}, ctx.Err()
		case "bigpkg":
			blob := make([]byte, 4<<20)
			rand.Read(blob)
			if err := os.WriteFile(filepath.Join(dir, "blob.bin"), blob, 0o644); err != nil {
				return builder.BuildResult{}, err
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(d.workDir, "layers"), 0o700); err != nil {
		return builder.BuildResult{}, err
	}
	if err := os.Rename(tmp, filepath.Join(d.workDir, final)); err != nil {
		return builder.BuildResult{}, err
	}
	ok = true
	return d.result(r, final)
}

func (d *demo) result(r builder.BuildRequest, dir string) (builder.BuildResult, error) {
	var lock []builder.Locked
	for _, p := range r.Spec.Packages {
		sum := sha256.Sum256([]byte(p.Name))
		lock = append(lock, builder.Locked{Name: p.Name, Version: "1.0.0", Hashes: []string{"sha256:" + hex.EncodeToString(sum[:])}})
	}
	return builder.BuildResult{CacheKey: r.CacheKey, Lock: lock, Dir: dir, Warnings: []string{"forgedemo writes stub modules, not real packages"}}, nil
}

func main() {
	plugin.ServeBuilder(plugin.Info{Name: "forgedemo", Version: "0.3.0"}, func(host.Host, backend.Config) (builder.Builder, error) {
		dir, err := builder.WorkDir()
		if err != nil {
			return nil, err
		}
		return &demo{workDir: dir}, nil
	})
}
