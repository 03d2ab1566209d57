package testindex

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/packages"
)

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var linkRe = regexp.MustCompile(`href="(/files/([^"#]+))#sha256=([0-9a-f]{64})"`)

// The index is PEP 503: every project page links its files with the
// sha256 of what is served, and each wheel is a valid wheel whose RECORD
// matches its contents.
func TestIndexServesPEP503(t *testing.T) {
	ix := New(t, nil)
	root := string(get(t, ix.URL+"/"))
	for _, name := range []string{ChainTop, ChainBottom, SdistOnly, Blocklisted} {
		if !strings.Contains(root, `href="/simple/`+name+`/"`) {
			t.Errorf("root page does not list %s", name)
		}
	}
	page := string(get(t, ix.URL+"/"+ChainBottom+"/"))
	links := linkRe.FindAllStringSubmatch(page, -1)
	if len(links) != 2 {
		t.Fatalf("%s page has %d links, want 2:\n%s", ChainBottom, len(links), page)
	}
	for _, l := range links {
		data := get(t, ix.server.URL+l[1])
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != l[3] {
			t.Fatalf("%s: link hash %s, served %x", l[2], l[3], sum)
		}
		checkWheel(t, l[2], data)
	}
	if !strings.Contains(string(get(t, ix.URL+"/"+SdistOnly+"/")), SdistName(SdistOnly, "1.0")+"#sha256=") {
		t.Fatal("sdist page does not link the sdist")
	}
	// Unnormalised and slash-less project URLs redirect or miss, never serve.
	resp, err := http.Get(ix.URL + "/Forge_A/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unnormalised name: %s", resp.Status)
	}
	// Wheels are reproducible, so locks made from them stay valid.
	_, a, _ := Wheel(ChainTop, "1.0", []string{ChainMiddle})
	_, b, _ := Wheel(ChainTop, "1.0", []string{ChainMiddle})
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the same wheel differ")
	}
}

func checkWheel(t *testing.T, name string, data []byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	contents := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		contents[f.Name] = string(b)
	}
	dist := strings.SplitN(name, "-", 3)
	info := dist[0] + "-" + dist[1] + ".dist-info/"
	for _, want := range []string{dist[0] + "/__init__.py", info + "METADATA", info + "WHEEL", info + "RECORD"} {
		if _, ok := contents[want]; !ok {
			t.Fatalf("%s lacks %s (has %v)", name, want, keys(contents))
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(contents[info+"RECORD"]), "\n") {
		f := strings.Split(line, ",")
		if f[0] == info+"RECORD" {
			continue
		}
		sum := sha256.Sum256([]byte(contents[f[0]]))
		if f[1] != "sha256="+base64.RawURLEncoding.EncodeToString(sum[:]) {
			t.Fatalf("%s: RECORD hash of %s is wrong", name, f[0])
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The index's policy fixtures are what the built-in policy says they are.
func TestIndexNamesUnderDefaultPolicy(t *testing.T) {
	p, err := packages.New(config.Default().EnvironmentBuilder)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Check([]string{Blocklisted, NeedsApproval}, packages.Python)
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Decisions[0]; d.Verdict != packages.Blocked || d.Rule != packages.RuleBlocklist {
		t.Errorf("%s: %s by %s", Blocklisted, d.Verdict, d.Rule)
	}
	if d := res.Decisions[1]; d.Verdict != packages.NeedsApproval {
		t.Errorf("%s: %s by %s", NeedsApproval, d.Verdict, d.Rule)
	}
	if err := p.CheckLocked([]string{ChainTop, ChainMiddle, ChainBottom, Blocklisted}, packages.Python); len(packages.Refusals(err)) != 1 {
		t.Errorf("CheckLocked: %v", err)
	}
}

// uv resolves and installs from the index the way the uv builder will:
// hashes generated and required, wheels only.
func TestUVAgainstIndex(t *testing.T) {
	uv, err := exec.LookPath("uv")
	if err != nil {
		t.Skip("uv is not installed (scripts/setup.sh installs it: make setup)")
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no /usr/bin/python3 for uv pip install --target")
	}
	ix := New(t, nil)
	dir := t.TempDir()
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, uv, args...)
		cmd.Dir = dir
		// Only the loopback index: no user config, no downloads of Python,
		// no proxy in between.
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "UV_CACHE_DIR=" + filepath.Join(dir, "cache"),
			"UV_NO_CONFIG=1", "UV_PYTHON_DOWNLOADS=never", "NO_PROXY=127.0.0.1", "UV_NO_PROGRESS=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	compile := func(in, out string, extra ...string) (string, error) {
		args := append([]string{"pip", "compile", "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_36",
			"--generate-hashes", "--default-index", ix.URL, "--no-header", "-o", out, in}, extra...)
		return run(args...)
	}

	// a → b → c resolves to all three, c at 2.0, each pinned with its hash.
	lock := filepath.Join(dir, "chain.lock")
	if out, err := compile(write("chain.in", ChainTop+"\n"), lock, "--only-binary", ":all:"); err != nil {
		t.Fatalf("uv pip compile: %v\n%s", err, out)
	}
	lockText, _ := os.ReadFile(lock)
	for _, want := range []struct{ name, version string }{{ChainTop, "1.0"}, {ChainMiddle, "1.0"}, {ChainBottom, "2.0"}} {
		pin := want.name + "==" + want.version
		hash := "--hash=sha256:" + ix.SHA256(WheelName(want.name, want.version))
		if !strings.Contains(string(lockText), pin) || !strings.Contains(string(lockText), hash) {
			t.Fatalf("lock lacks %s with %s:\n%s", pin, hash, lockText)
		}
	}

	// The lock installs with hashes required and wheels only.
	target := filepath.Join(dir, "target")
	out, err := run("pip", "install", "--python", python, "--target", target, "--default-index", ix.URL,
		"--only-binary", ":all:", "--require-hashes", "-r", lock)
	if err != nil {
		t.Fatalf("uv pip install: %v\n%s", err, out)
	}
	for _, mod := range []string{"forge_a", "forge_b", "forge_c"} {
		if _, err := os.Stat(filepath.Join(target, mod, "__init__.py")); err != nil {
			t.Errorf("%s not installed: %v\n%s", mod, err, out)
		}
	}
	t.Logf("lock:\n%s", lockText)
	if b, _ := os.ReadFile(filepath.Join(target, "forge_c", "__init__.py")); !strings.Contains(string(b), `"2.0"`) {
		t.Errorf("forge_c is %q, want version 2.0", b)
	}

	// A tampered lock is refused under --require-hashes.
	bad := strings.Replace(string(lockText), ix.SHA256(WheelName(ChainBottom, "2.0")), strings.Repeat("0", 64), 1)
	out, err = run("pip", "install", "--python", python, "--target", filepath.Join(dir, "bad"), "--default-index", ix.URL,
		"--only-binary", ":all:", "--require-hashes", "-r", write("bad.lock", bad))
	if err == nil || !strings.Contains(strings.ToLower(out), "hash") {
		t.Fatalf("tampered lock installed (err %v):\n%s", err, out)
	}

	// The conflict has no solution.
	out, err = compile(write("conflict.in", Conflict+"\n"), filepath.Join(dir, "conflict.lock"), "--only-binary", ":all:")
	if err == nil || !strings.Contains(out, "No solution found") {
		t.Fatalf("conflict resolved (err %v):\n%s", err, out)
	}

	// The sdist-only package is refused under --only-binary and its sdist is
	// never downloaded, so no package code could run.
	out, err = compile(write("sdist.in", SdistOnly+"\n"), filepath.Join(dir, "sdist.lock"), "--only-binary", ":all:")
	if err == nil || !strings.Contains(out, SdistOnly) {
		t.Fatalf("sdist-only package resolved under --only-binary (err %v):\n%s", err, out)
	}
	out2, err := run("pip", "install", "--python", python, "--target", filepath.Join(dir, "sdist"), "--default-index", ix.URL,
		"--only-binary", ":all:", SdistOnly)
	if err == nil {
		t.Fatalf("sdist-only package installed under --only-binary:\n%s", out2)
	}
	if n := ix.Hits("/files/" + SdistName(SdistOnly, "1.0")); n != 0 {
		t.Fatalf("the sdist was fetched %d times under --only-binary", n)
	}
	t.Logf("sdist-only refusal: %s", strings.TrimSpace(out))
}
