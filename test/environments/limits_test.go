package environments

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/environments"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/core/packages/testindex"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// A package's extra through MCP: forge-extras[fancy] pulls in
// forge-fancy-dep, which is locked and importable in the image (issue 20,
// item 9: the extra was dropped with a notice).
func TestUVBuilderExtras(t *testing.T) {
	testenv.Require(t)
	ix := testindex.New(t, []testindex.Project{
		{Name: "forgetest-extras", Version: "1.0", Extras: map[string][]string{"fancy": {"forgetest-fancy-dep"}}},
		{Name: "forgetest-fancy-dep", Version: "1.0"},
	})
	s := startBuilder(t, uvConfig(ix, ""))
	out, res := build(t, s, map[string]any{"name": "uv-extras", "packages": []string{"forgetest-extras[fancy]"}})
	if !out.Success || versions(out.Packages) != "forgetest-extras==1.0 forgetest-fancy-dep==1.0" {
		t.Fatalf("%s\n%+v", testenv.Text(res), out)
	}
	if strings.Contains(testenv.Text(res), "not passed") {
		t.Fatalf("a notice instead of the extra: %s", testenv.Text(res))
	}
	var ex mcpserver.ExecuteOutput
	r := s.Call(t, "execute_python", map[string]any{"code": "import forgetest_extras, forgetest_fancy_dep\nprint(forgetest_fancy_dep.__version__)", "custom_image": out.Image}, &ex)
	if !ex.Success || strings.TrimSpace(ex.Stdout) != "1.0" {
		t.Fatalf("the extra's dependency in the image: %s", testenv.Text(r))
	}
}

// A wheel of about a megabyte that unpacks to 1 GiB, against a
// max_image_size that leaves 48 MiB beside the base image: the build is
// refused naming the limit, stopped near it while unpacking (the work
// directory and cache never hold much more), and nothing of it remains:
// no image, no layer, no scratch, nothing new in the cache
// (environment_builder.uv_cache_path, which is honoured). Issue 20, item 3.
func TestUVBuilderStopsDecompressionBomb(t *testing.T) {
	testenv.Require(t)
	const payload, room = 1 << 30, 48 << 20
	ix := testindex.New(t, []testindex.Project{{Name: "forgetest-bomb", Version: "1.0", Payload: payload}, {Name: "forge-c", Version: "1.0"}})
	base, ok, err := testenv.Images(t).Image(context.Background(), "mcp-forge/python:3.11")
	if err != nil || !ok {
		t.Fatalf("base image: %v %v", ok, err)
	}
	limit := base.Size + room
	s := startBuilder(t, uvConfig(ix, fmt.Sprintf("max_image_size = \"%dk\"", limit/1024)))
	cache := filepath.Join(s.Base, "uv-cache")
	if out, res := build(t, s, map[string]any{"name": "uv-small", "packages": []string{"forge-c"}}); !out.Success {
		t.Fatal(testenv.Text(res))
	}
	kept := entries(t, cache)
	if len(kept) == 0 {
		t.Fatalf("environment_builder.uv_cache_path %s was not used", cache)
	}
	layers := entries(t, filepath.Join(s.Base, "builds", "uv", "uv", "layers"))

	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if n := bytesUnder(s.Base); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	startBytes := bytesUnder(s.Base)
	out, res := build(t, s, map[string]any{"name": "uv-bomb", "packages": []string{"forgetest-bomb"}})
	close(stop)
	<-done
	msg := testenv.Text(res)
	if out.Success || !res.IsError || !strings.Contains(msg, environments.RuleImageSize) || !strings.Contains(msg, "max_image_size") {
		t.Fatalf("want a max_image_size refusal: %s", msg)
	}
	grew := peak.Load() - startBytes
	t.Logf("grew by at most %d bytes while unpacking (room %d): %s", grew, room, msg)
	if grew > 3*room {
		t.Fatalf("the build wrote %d bytes before it was stopped; the layer had room for %d", grew, room)
	}
	if _, ok, _ := testenv.Images(t).Image(context.Background(), "mcp-forge/custom:uv-bomb"); ok {
		t.Fatal("an image of the refused build exists")
	}
	if now := entries(t, filepath.Join(s.Base, "builds", "uv", "uv", "layers")); strings.Join(now, " ") != strings.Join(layers, " ") {
		t.Fatalf("layers %v, before %v", now, layers)
	}
	if tmp := entries(t, filepath.Join(s.Base, "builds", "uv", "uv", "tmp")); len(tmp) > 0 {
		t.Fatalf("scratch left: %v", tmp)
	}
	if now := entries(t, cache); strings.Join(now, " ") != strings.Join(kept, " ") {
		t.Fatalf("cache entries %v, before the build %v", now, kept)
	}
	filepath.WalkDir(s.Base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(p, "forgetest_bomb") {
			t.Errorf("%s remains", p)
		}
		return nil
	})
	if n := bytesUnder(s.Base); n > startBytes+room {
		t.Fatalf("%d bytes more under the base path than before the build", n-startBytes)
	}
}

// entries lists a directory two levels deep.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	top, _ := os.ReadDir(dir)
	for _, e := range top {
		out = append(out, e.Name())
		if e.IsDir() {
			sub, _ := os.ReadDir(filepath.Join(dir, e.Name()))
			for _, s := range sub {
				out = append(out, e.Name()+"/"+s.Name())
			}
		}
	}
	return out
}

// bytesUnder is the size of the distinct files under dir.
func bytesUnder(dir string) int64 {
	seen := map[[2]uint64]bool{}
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		k := inode(fi)
		if !seen[k] {
			seen[k] = true
			// Allocated, not apparent, size: what fills the host disk (uv
			// may size a file before writing it; a 1 GiB sparse file of
			// 50 MB written was counted as 1 GiB in CI).
			n += allocated(fi)
		}
		return nil
	})
	return n
}

func inode(fi fs.FileInfo) [2]uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]uint64{uint64(st.Dev), st.Ino}
	}
	return [2]uint64{0, uint64(time.Now().UnixNano())}
}

func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
