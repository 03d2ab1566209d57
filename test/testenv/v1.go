package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/mcpserver"
)

// V1Commit is the last tree of plugin API v1: its SDK and plugins are what
// third parties built against before v2.
const V1Commit = "aa0b963"

var (
	v1Once sync.Once
	v1Tree string
	v1Err  error
)

// SourceV1 is the v1 tree (go.mod, go.sum, go.work, sdk and plugins of
// V1Commit), extracted from git into a directory of its own that later
// runs reuse (a commit's tree never changes).
func SourceV1(t testing.TB) string {
	t.Helper()
	root := RepoRoot()
	v1Once.Do(func() {
		if out, err := exec.Command("git", "-C", root, "cat-file", "-e", V1Commit+"^{commit}").CombinedOutput(); err != nil {
			v1Err = &v1Missing{string(out)}
			return
		}
		v1Tree = filepath.Join(os.TempDir(), "mcp-forge-api-v1-"+V1Commit)
		if _, err := os.Stat(filepath.Join(v1Tree, "go.work")); err == nil {
			return
		}
		tmp, err := os.MkdirTemp("", "mcp-forge-api-v1-")
		if err != nil {
			v1Err = err
			return
		}
		cmd := exec.Command("sh", "-c", "git -C \"$1\" archive "+V1Commit+" go.mod go.sum go.work sdk plugins | tar -x -C \"$2\"", "sh", root, tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(tmp)
			v1Err = &v1Missing{string(out)}
			return
		}
		// Complete or absent: another test binary may be extracting too.
		if err := os.Rename(tmp, v1Tree); err != nil {
			os.RemoveAll(tmp)
		}
	})
	if v1Err != nil {
		t.Fatalf("API v1 compatibility needs commit %s (API v1) in %s: %v; fetch the repository's full history (git fetch --unshallow)", V1Commit, root, v1Err)
	}
	return v1Tree
}

// BuildV1 builds packages of the v1 tree (paths relative to its root) into
// its bin/, with the normal module cache.
func BuildV1(t testing.TB, pkgs ...string) map[string]string {
	t.Helper()
	tree := SourceV1(t)
	out := map[string]string{}
	for _, pkg := range pkgs {
		bin := filepath.Join(tree, "bin", "mcp-forge-plugin-"+filepath.Base(pkg))
		if _, err := os.Stat(bin); err != nil {
			build := exec.Command("go", "build", "-o", bin, "./"+pkg)
			build.Dir = tree
			if b, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build %s of %s: %v\n%s", pkg, V1Commit, err, b)
			}
		}
		out[pkg] = bin
	}
	return out
}

type v1Missing struct{ out string }

func (e *v1Missing) Error() string { return strings.TrimSpace(e.out) }

// PluginAPIs is the plugin API version the server negotiated with each
// loaded plugin, by name, as its environment resource reports them.
func PluginAPIs(t *testing.T, s *Server) map[string]int {
	t.Helper()
	res, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.EnvironmentURI})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Plugins []struct {
			Name       string
			APIVersion int `json:"api_version"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &info); err != nil {
		t.Fatalf("environment resource: %v", err)
	}
	got := map[string]int{}
	for _, p := range info.Plugins {
		got[p.Name] = p.APIVersion
	}
	return got
}
