package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/runtime"
)

// fuzzBase builds a volumes.base_path with real directories and symlinks
// that try every way out: to the host, to another session, from the
// read-only area into a writable one, and upwards. The base itself is
// reached through a symlink, as /var/lib may be. It returns the base as
// configured and as resolved.
func fuzzBase(tb testing.TB) (configured, real string) {
	tb.Helper()
	tmp, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	real = filepath.Join(tmp, "real")
	outside := filepath.Join(tmp, "outside")
	dirs := []string{
		"sessions/ws1.t/data/deep", "sessions/ws2.t/secret", "uploads/ws1.t/in", "uploads/ws2.t",
		"shared/readonly/lib", "shared/other", "sessions/ws1.t/x", "sessions/ws1.t/secret",
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(real, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(outside, "x"), 0o755); err != nil {
		tb.Fatal(err)
	}
	links := map[string]string{
		"sessions/ws1.t/etc":       "/etc",
		"sessions/ws1.t/ssl":       "/etc/ssl",
		"sessions/ws1.t/other":     filepath.Join(real, "sessions/ws2.t"),
		"sessions/ws1.t/rel-other": "../ws2.t/secret",
		"sessions/ws1.t/up":        "..",
		"sessions/ws1.t/out":       outside,
		"sessions/ws1.t/outx":      filepath.Join(outside, "x"),
		"sessions/ws1.t/shared":    filepath.Join(real, "shared/readonly"),
		"sessions/ws1.t/loop":      "loop",
		"sessions/ws1.t/dangling":  "/nonexistent/forge",
		"shared/readonly/rw":       filepath.Join(real, "sessions/ws1.t"),
		"shared/readonly/ws2":      filepath.Join(real, "sessions/ws2.t"),
		"shared/readonly/root":     "/",
		"uploads/ws1.t/sessions":   "../../sessions",
		"uploads/ws1.t/ws2":        "../ws2.t",
		"sessions/ws3.t":           filepath.Join(real, "sessions/ws2.t"),
		"sessions/ws1.t/data/up2":  "../..",
		"sessions/ws1.t/data/self": ".",
	}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(real, name)); err != nil {
			tb.Fatal(err)
		}
	}
	configured = filepath.Join(tmp, "base")
	if err := os.Symlink(real, configured); err != nil {
		tb.Fatal(err)
	}
	return configured, real
}

// FuzzCheckMount: whatever CheckMount accepts is, as the kernel resolves the
// source path it will bind (symlinks followed, ".." taken after them), inside
// <base>/sessions/<ws>, <base>/uploads/<ws>, or read-only inside
// <base>/shared/readonly; every refusal is a Violation naming its rule.
func FuzzCheckMount(f *testing.F) {
	configured, real := fuzzBase(f)
	p := New(testSettings(configured), filepath.EvalSymlinks)
	f.Fuzz(func(t *testing.T, src string, underBase bool, target string, readOnly bool, ws string) {
		if underBase {
			// Not joined: ".." and "//" must reach the policy as written.
			src = configured + "/" + src
		}
		m := runtime.Mount{Source: src, Target: target, ReadOnly: readOnly}
		err := p.CheckMount(m, ws)
		if err != nil {
			var v *Violation
			if !errors.As(err, &v) || v.Rule == "" {
				t.Fatalf("refusal without a rule: %v", err)
			}
			return
		}
		if !filepath.IsAbs(target) || forbiddenTarget(filepath.Clean(target)) || filepath.Clean(target) == "/" {
			t.Fatalf("accepted target %q", target)
		}
		// The kernel follows the path as written; a runtime that cleans it
		// first binds the lexical path. Both must land in an allowed area.
		for _, path := range []string{src, filepath.Clean(src)} {
			if why := outsideAreas(path, real, ws, readOnly); why != "" {
				t.Fatalf("accepted %q (workspace %q, read-only %v): %s", src, ws, readOnly, why)
			}
		}
	})
}

// outsideAreas says why path, resolved on the file system, is not a place a
// mount for workspace ws may bind, or "".
func outsideAreas(path, base, ws string, readOnly bool) string {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "it does not resolve: " + err.Error()
	}
	rel, err := filepath.Rel(base, resolved)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return resolved + " is outside the base " + base
	}
	parts := strings.Split(rel, "/")
	switch {
	case len(parts) >= 2 && (parts[0] == "sessions" || parts[0] == "uploads"):
		if ws == "" || parts[1] != ws {
			return resolved + " is another workspace"
		}
	case len(parts) >= 2 && parts[0] == "shared" && parts[1] == "readonly":
		if !readOnly {
			return resolved + " is the read-only area, mounted read-write"
		}
	default:
		return resolved + " is not an allowed area"
	}
	return ""
}
