package environments

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/packages/testindex"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// benchSpec is the fixed spec list of the BenchmarkEnvBuild rows: the test
// index's dependency chain (3 wheels) and six independent wheels.
var benchSpec = []string{"forge-a", "forge-bench-1", "forge-bench-2", "forge-bench-3", "forge-bench-4", "forge-bench-5", "forge-bench-6"}

func benchIndex(b *testing.B) *testindex.Index {
	projects := testindex.DefaultProjects()
	for i := 1; i <= 6; i++ {
		projects = append(projects, testindex.Project{Name: fmt.Sprintf("forge-bench-%d", i), Version: "1.0"})
	}
	return testindex.New(b, projects)
}

// benchServer is a uv-builder server on the bench index, with limits that
// do not stop a benchmark.
func benchServer(b *testing.B) *testenv.Server {
	ix := benchIndex(b)
	return startBuilder(b, uvConfig(ix, `max_build_time = 600

[environment_builder.build_rate_limit]
max_builds_per_hour = 100000
max_builds_per_day = 100000`))
}

func benchBuild(b *testing.B, s *testenv.Server, name string, wantHit bool) {
	b.Helper()
	out, res := build(b, s, map[string]any{"name": name, "packages": benchSpec})
	if !out.Success || out.CacheHit != wantHit || len(out.Packages) != 9 {
		b.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
}

func benchDelete(b *testing.B, s *testenv.Server, name string) {
	b.Helper()
	var del mcpserver.DeleteEnvironmentOutput
	if res := s.Call(b, "delete_environment", map[string]any{"name": name}, &del); !del.Deleted {
		b.Fatal(testenv.Text(res))
	}
}

// uvDirs removes the uv builder's layers (and with cache its download
// cache) so that the next build resolves, fetches and installs again.
func uvDirs(b *testing.B, s *testenv.Server, cache bool) {
	b.Helper()
	root := filepath.Join(s.Base, "builds", "uv", "uv")
	dirs := []string{filepath.Join(root, "layers")}
	if cache {
		dirs = append(dirs, filepath.Join(root, "cache"))
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			b.Fatal(err)
		}
	}
}

// Cold: no uv cache, no layer: resolve, download, install, layer, check.
func BenchmarkEnvBuildCold(b *testing.B) {
	s := benchServer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		uvDirs(b, s, true)
		name := fmt.Sprintf("bench-cold-%d", i)
		b.StartTimer()
		benchBuild(b, s, name, false)
		b.StopTimer()
		benchDelete(b, s, name)
		b.StartTimer()
	}
}

// Warm cache: the uv cache holds every wheel, the layer is gone and the
// name is new: resolve and install from the cache, then layer and check.
func BenchmarkEnvBuildWarmCache(b *testing.B) {
	s := benchServer(b)
	benchBuild(b, s, "bench-warm", false)
	benchDelete(b, s, "bench-warm")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		uvDirs(b, s, false)
		name := fmt.Sprintf("bench-warm-%d", i)
		b.StartTimer()
		benchBuild(b, s, name, false)
		b.StopTimer()
		benchDelete(b, s, name)
		b.StartTimer()
	}
}

// Cache hit: the same name and spec again.
func BenchmarkEnvBuildCacheHit(b *testing.B) {
	s := benchServer(b)
	benchBuild(b, s, "bench-hit", false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchBuild(b, s, "bench-hit", true)
	}
}
