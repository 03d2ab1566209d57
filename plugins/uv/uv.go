package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/plugins/internal/prune"
	"github.com/mcp-forge/mcp-forge/plugins/internal/toolrun"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Info identifies this plugin; its version is part of every cache key, so
// a new builder never reuses a layer an older one made.
var Info = plugin.Info{Name: "uv", Version: "0.1.0", Description: "Python environments from wheels: uv pip compile (hashed lock) and uv pip install --target; pip when no uv is available", Config: Config{}}

// Config is [plugins.uv.config].
type Config struct {
	// UVPath is the uv binary: "" looks on PATH, then where `make setup`
	// installs it; "none" forces the pip fallback.
	UVPath string `json:"uv_path"`
	// PythonPath is the interpreter whose pip the fallback runs (and uv
	// may inspect): by default /usr/bin/python3 (Debian's, the same
	// Python as the images').
	PythonPath string `json:"python_path"`
	// UVCachePath is uv's (or pip's) download cache: by default
	// <work dir>/uv/cache. It must be on the work directory's filesystem,
	// or uv copies instead of hard-linking. environment_builder.uv_cache_path
	// is its alias: the core sets it, and this key wins.
	UVCachePath string `json:"uv_cache_path"`
	// FindLinks are local directories of wheels searched besides the index
	// (all of it when offline). environment_builder.find_links is its
	// alias: the core sets it, and this key wins.
	FindLinks []string `json:"find_links"`
	// PythonVersion and Platform are the target's when the base image's
	// labels do not say (io.mcp-forge.python-version, io.mcp-forge.platform).
	PythonVersion string `json:"python_version"`
	Platform      string `json:"platform"`
	// IndexURL is the index when a spec names none (default PyPI).
	IndexURL string `json:"index_url"`
	// Timeout bounds each uv or pip process (default 10m); the core's
	// build timeout bounds the whole build.
	Timeout string `json:"timeout"`
}

// Labels of a base image this builder reads.
const (
	LabelPythonVersion = "io.mcp-forge.python-version"
	LabelPlatform      = "io.mcp-forge.platform"
)

// Defaults: Debian 12's Python and glibc.
const (
	defaultPythonVersion = "3.11"
	defaultPlatform      = "x86_64-manylinux_2_36"
	defaultIndex         = "https://pypi.org/simple"
	setupUV              = "/usr/local/lib/mcp-forge/uv" // scripts/setup.sh
)

// The builder's phases, in order (Progress.Step is the index + 1).
var steps = []string{"resolve", "download", "install", "done"}

// minimalPath is the only PATH uv and pip see, and where tools are looked
// up: a user's PATH (pyenv shims, ~/.local/bin) must not change a build.
const minimalPath = "/usr/local/bin:/usr/bin:/bin"

var (
	pyVersionRe = regexp.MustCompile(`^3\.[0-9]{1,2}$`)
	platformRe  = regexp.MustCompile(`^[a-z0-9_]+-[a-z0-9_]+$`)
)

type uvBuilder struct {
	cfg     Config
	dir     string // the work directory (builder.WorkDir): layers and the default cache live in dir/uv
	uv      string // "" when falling back to pip
	python  string
	timeout time.Duration
	log     hclog.Logger
	why     string // why there is no uv, for the warning
	missing error  // neither uv nor pip: every plan is refused with it
	// storage is held shared by every uv or pip run (they read and fill the
	// cache, and link from it) and exclusively to remove from the cache or
	// the layers: a refused build's leftovers, pruning.
	storage sync.RWMutex
}

// pruneGrace keeps layers and cache entries used this recently: a build in
// flight may be reading them (a layer waits for the core's layering after
// Build returned).
const pruneGrace = time.Hour

// New is the plugin factory.
func New(_ host.Host, raw backend.Config) (builder.Builder, error) {
	var cfg Config
	if err := raw.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("uv builder configuration: %w", err)
	}
	dir, err := builder.WorkDir()
	if err != nil {
		return nil, fmt.Errorf("uv builder: %w", err)
	}
	return newBuilder(cfg, dir)
}

func newBuilder(cfg Config, dir string) (*uvBuilder, error) {
	b := &uvBuilder{cfg: cfg, dir: dir, log: hclog.New(&hclog.LoggerOptions{Name: "uv-builder", Output: os.Stderr, Level: hclog.Info})}
	if cfg.PythonVersion != "" && !pyVersionRe.MatchString(cfg.PythonVersion) {
		return nil, fmt.Errorf("uv builder: python_version %q is not MAJOR.MINOR (e.g. 3.11)", cfg.PythonVersion)
	}
	if cfg.Platform != "" && !platformRe.MatchString(cfg.Platform) {
		return nil, fmt.Errorf("uv builder: platform %q is not ARCH-TAG (e.g. x86_64-manylinux_2_36)", cfg.Platform)
	}
	if cfg.IndexURL != "" {
		if err := (builder.PlanRequest{Language: "python", BaseImage: "x", Index: builder.Index{URL: cfg.IndexURL}}).Validate(); err != nil {
			return nil, fmt.Errorf("uv builder: index_url: %s", mask(err.Error()))
		}
	}
	if cfg.UVCachePath != "" && !filepath.IsAbs(cfg.UVCachePath) {
		return nil, fmt.Errorf("uv builder: uv_cache_path %q is not an absolute path", cfg.UVCachePath)
	}
	// A directory reaches uv's and pip's command lines: nothing they could
	// read as an option or a second argument.
	for i, d := range cfg.FindLinks {
		if !strings.HasPrefix(d, "/") || strings.Contains(d, "..") || strings.ContainsAny(d, " \t\r\n") {
			return nil, fmt.Errorf("uv builder: find_links[%d] = %q is not a clean absolute path (no '..', no white space)", i, d)
		}
	}
	b.timeout = 10 * time.Minute
	if cfg.Timeout != "" {
		d, err := time.ParseDuration(cfg.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("uv builder: timeout %q is not a positive duration (e.g. 10m)", cfg.Timeout)
		}
		b.timeout = d
	}
	b.python = cfg.PythonPath
	if b.python == "" {
		b.python = "/usr/bin/python3"
	}
	switch cfg.UVPath {
	case "none":
		b.why = `uv_path = "none"`
	case "":
		if p, err := lookPath("uv"); err == nil {
			b.uv = p
		} else if isExecutable(setupUV) {
			b.uv = setupUV
		} else {
			b.why = "no uv on PATH (" + minimalPath + ") or at " + setupUV + " (make setup installs it)"
		}
	default:
		if !filepath.IsAbs(cfg.UVPath) || !isExecutable(cfg.UVPath) {
			return nil, fmt.Errorf("uv builder: uv_path %q is not an absolute path to an executable (or \"none\" for pip)", cfg.UVPath)
		}
		b.uv = cfg.UVPath
	}
	if b.uv == "" && !isExecutable(b.python) {
		// The plugin still loads, so the server starts; builds are refused
		// with the reason.
		b.missing = host.Errorf(host.KindUnavailable, "the uv builder cannot build here: no uv (%s) and python_path %q is not an executable for the pip fallback", b.why, b.python)
		b.log.Warn("builds will be refused", "reason", b.missing)
	}
	return b, nil
}

func lookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(minimalPath) {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in %s", name, minimalPath)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// target is what a spec builds for.
type target struct {
	python, platform string
	index            builder.Index
	findLinks        []string // the configured find_links
}

func (b *uvBuilder) target(r builder.PlanRequest) (target, error) {
	t := target{python: r.BaseLabels[LabelPythonVersion], platform: r.BaseLabels[LabelPlatform], index: r.Index, findLinks: b.cfg.FindLinks}
	if t.python == "" {
		t.python = b.cfg.PythonVersion
	}
	if t.python == "" {
		t.python = defaultPythonVersion
	}
	if t.platform == "" {
		t.platform = b.cfg.Platform
	}
	if t.platform == "" {
		t.platform = defaultPlatform
	}
	if !pyVersionRe.MatchString(t.python) {
		return t, host.Errorf(host.KindInvalid, "base image %s: label %s = %q is not a Python MAJOR.MINOR version", r.BaseImage, LabelPythonVersion, t.python)
	}
	if !platformRe.MatchString(t.platform) {
		return t, host.Errorf(host.KindInvalid, "base image %s: label %s = %q is not a platform (e.g. x86_64-manylinux_2_36)", r.BaseImage, LabelPlatform, t.platform)
	}
	if t.index.URL == "" {
		t.index.URL = b.cfg.IndexURL
	}
	if t.index.URL == "" {
		t.index.URL = defaultIndex
	}
	return t, nil
}

// Plan validates the spec and computes its cache key; it runs nothing.
func (b *uvBuilder) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	if err := r.Validate(); err != nil {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "%s", mask(err.Error()))
	}
	if b.missing != nil {
		return builder.Plan{}, b.missing
	}
	if r.Language != "python" {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "the uv builder builds Python environments, not %q (use the debian builder for R)", r.Language)
	}
	if len(r.Packages) == 0 {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "the spec names no package")
	}
	t, err := b.target(r)
	if err != nil {
		return builder.Plan{}, err
	}
	pkgs := sortedPackages(r.Packages)
	h := sha256.New()
	// Every input that changes what gets installed, and nothing secret:
	// credentials in index URLs are stripped, so rotating a password keeps
	// the cache.
	fmt.Fprintf(h, "builder %s %s\nimage %q\npython %q\nplatform %q\n", Info.Name, Info.Version, r.BaseImageID, t.python, t.platform)
	fmt.Fprintf(h, "index %q\n", stripCredentials(t.index.URL))
	for _, u := range t.index.ExtraURLs {
		fmt.Fprintf(h, "extra %q\n", stripCredentials(u))
	}
	for _, d := range t.findLinks {
		fmt.Fprintf(h, "find-links %q\n", d)
	}
	fmt.Fprintf(h, "offline %v\n", t.index.Offline)
	for _, p := range pkgs {
		fmt.Fprintf(h, "pkg %q %q", p.Name, p.Version)
		if len(p.Extras) > 0 {
			fmt.Fprintf(h, " extras %q", strings.Join(p.Extras, ","))
		}
		fmt.Fprintln(h)
	}
	plan := builder.Plan{CacheKey: "sha256:" + hex.EncodeToString(h.Sum(nil)), Packages: pkgs, Steps: slices.Clone(steps)}
	if b.uv == "" {
		plan.Warnings = append(plan.Warnings, b.fallbackWarning())
	}
	return plan, nil
}

func (b *uvBuilder) fallbackWarning() string {
	return "built with pip, not uv: " + b.why + "; pip resolves the same wheels-only lock but has no shared hard-linked cache"
}

// sortedPackages normalises names (PEP 503) and sorts them, so the order
// and spelling of a request do not change its key.
func sortedPackages(in []builder.Package) []builder.Package {
	out := make([]builder.Package, len(in))
	for i, p := range in {
		var ex []string
		for _, e := range p.Extras {
			ex = append(ex, normalize(e))
		}
		slices.Sort(ex)
		out[i] = builder.Package{Name: normalize(p.Name), Version: p.Version, Extras: slices.Compact(ex)}
	}
	slices.SortFunc(out, func(a, b builder.Package) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// normalize is PEP 503's name normalisation.
func normalize(name string) string {
	return strings.ToLower(regexp.MustCompile(`[-_.]+`).ReplaceAllString(name, "-"))
}

// requirement is a package as a requirements-file line: a bare version
// means exactly that version; extras as PEP 508 writes them, so the
// resolver locks their dependencies too.
func requirement(p builder.Package) string {
	v := p.Version
	if v != "" && !strings.ContainsAny(v[:1], "<>=!~") {
		v = "==" + v
	}
	name := p.Name
	if len(p.Extras) > 0 {
		name += "[" + strings.Join(p.Extras, ",") + "]"
	}
	return name + v
}

// Build resolves, fetches and installs the spec into a layer directory
// keyed by its lock's hash, reusing the directory when it already exists.
func (b *uvBuilder) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	plan, err := b.Plan(ctx, r.Spec)
	if err != nil {
		return builder.BuildResult{}, err
	}
	if plan.CacheKey != r.CacheKey {
		return builder.BuildResult{}, host.Errorf(host.KindInvalid, "cache key %q is not this spec's (%q): plan the spec again", r.CacheKey, plan.CacheKey)
	}
	t, _ := b.target(r.Spec) // Plan checked it
	report := func(step int, msg string) {
		if progress != nil && ctx.Err() == nil {
			progress(builder.Progress{Phase: steps[step-1], Step: step, Steps: len(steps), Message: msg})
		}
	}
	root := filepath.Join(b.dir, "uv")
	// uv_cache_path (or its alias environment_builder.uv_cache_path), else
	// beside the layers.
	cache := b.cfg.UVCachePath
	if cache == "" {
		cache = filepath.Join(root, "cache")
	}
	keep := ""
	defer func() { b.prune(root, cache, keep, r.Prune) }()
	for _, d := range []string{filepath.Join(root, "tmp"), filepath.Join(root, "layers"), cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
		}
	}
	if !sameFilesystem(cache, root) {
		res0 := "uv_cache_path " + cache + " is not on the work directory's filesystem: uv copies every file instead of hard-linking it (slower, and the layer's files are stored twice)"
		b.log.Warn("cache on another filesystem", "uv_cache_path", cache, "work_dir", b.dir)
		plan.Warnings = append(plan.Warnings, res0)
	}
	scratch, err := os.MkdirTemp(filepath.Join(root, "tmp"), "build-")
	if err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	defer os.RemoveAll(scratch) // partial installs never outlive the build

	reqs := make([]string, len(plan.Packages))
	for i, p := range plan.Packages {
		reqs[i] = requirement(p)
	}
	if err := os.WriteFile(filepath.Join(scratch, "requirements.in"), []byte(strings.Join(reqs, "\n")+"\n"), 0o644); err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	res := builder.BuildResult{CacheKey: plan.CacheKey, Warnings: slices.Clone(plan.Warnings)}
	tool := "uv"
	if b.uv == "" {
		tool = "pip"
	}
	report(1, fmt.Sprintf("resolving %d packages with %s for Python %s on %s", len(reqs), tool, t.python, t.platform))
	if err := os.MkdirAll(filepath.Join(scratch, "tmp"), 0o700); err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	run := &runner{b: b, home: scratch, cache: cache, max: r.MaxBytes}
	// What the cache held before: what a refused build adds to it goes.
	before := cacheEntries(cache)
	var lock []builder.Locked
	if b.uv != "" {
		lock, err = b.compileUV(ctx, run, t, scratch)
	} else {
		lock, err = b.compilePip(ctx, run, t, scratch)
	}
	if err != nil {
		return builder.BuildResult{}, b.tooLarge(err, cache, before, r.MaxBytes)
	}
	res.Lock = lock
	lockText := lockFile(lock)
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s %s\npython %s %s\n%s", Info.Name, Info.Version, t.python, t.platform, lockText)))
	lockHash := hex.EncodeToString(sum[:])[:32]
	layer := filepath.Join(root, "layers", lockHash)
	res.Dir = filepath.Join("uv", "layers", lockHash, "tree")
	keep = layer
	if st, err := os.Stat(filepath.Join(layer, "lock.json")); err == nil && st.Mode().IsRegular() {
		size, err := dirSize(filepath.Join(layer, "tree"))
		if err != nil {
			return builder.BuildResult{}, fmt.Errorf("uv builder: cached layer %s: %w", lockHash, err)
		}
		if r.MaxBytes > 0 && size > r.MaxBytes {
			return builder.BuildResult{}, host.Errorf(host.KindTooLarge, "the layer of this lock (built before, %s) takes %d bytes, more than the %d this build may write", lockHash, size, r.MaxBytes)
		}
		now := time.Now()
		_ = os.Chtimes(filepath.Join(layer, "lock.json"), now, now) // last used: pruning keeps it longer
		res.SizeBytes = size
		res.Warnings = append(res.Warnings, "cache hit: the layer of this lock was built before ("+lockHash+")")
		report(4, fmt.Sprintf("cache hit: %d packages already installed", len(lock)))
		return res, ctx.Err()
	}
	if err := os.WriteFile(filepath.Join(scratch, "lock.txt"), []byte(lockText), 0o644); err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	site := filepath.Join(scratch, "layer", "tree", "usr", "local", "lib", "python"+t.python, "dist-packages")
	// The tree's directories are laid over the image's own /usr/...: they
	// get the usual 0755 whatever this process's umask, so copying the
	// layer never changes who can read /usr.
	if err := mkdirAll0755(filepath.Join(scratch, "layer", "tree"), site); err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	report(2, fmt.Sprintf("downloading 0 of %d packages", len(lock)))
	if b.uv != "" {
		err = b.installUV(ctx, run, t, scratch, site, len(lock), report)
	} else {
		err = b.installPip(ctx, run, t, scratch, site, len(lock), report)
	}
	if err != nil {
		return builder.BuildResult{}, b.tooLarge(err, cache, before, r.MaxBytes)
	}
	os.Remove(filepath.Join(site, ".lock")) // uv's lock file of the target
	if r.MaxBytes > 0 {
		// The tool's writes were bounded; a tree linked from what the cache
		// already held was not: measured before it becomes a layer.
		size, err := dirSize(filepath.Join(scratch, "layer", "tree"))
		if err != nil {
			return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
		}
		if size > r.MaxBytes {
			return builder.BuildResult{}, b.tooLarge(&toolrun.WriteLimitError{Tool: tool, Written: size, Limit: r.MaxBytes}, cache, before, r.MaxBytes)
		}
	}
	meta, _ := json.MarshalIndent(map[string]any{"cache_key": plan.CacheKey, "python": t.python, "platform": t.platform, "tool": tool, "lock": lock}, "", "  ")
	if err := os.WriteFile(filepath.Join(scratch, "layer", "lock.json"), meta, 0o644); err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return builder.BuildResult{}, err
	}
	// The layer appears whole or not at all: a concurrent identical build
	// that renamed first wins and this one's copy goes with the scratch dir.
	if err := os.Rename(filepath.Join(scratch, "layer"), layer); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	size, err := dirSize(filepath.Join(layer, "tree"))
	if err != nil {
		return builder.BuildResult{}, fmt.Errorf("uv builder: %w", err)
	}
	res.SizeBytes = size
	report(4, fmt.Sprintf("installed %d packages (%d bytes)", len(lock), size))
	return res, nil
}

func isNotEmpty(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && (errors.Is(le.Err, syscall.ENOTEMPTY) || errors.Is(le.Err, syscall.EEXIST))
}

// indexArgs are the index options for uv; pip's are spelled differently.
func indexArgs(t target, uv bool) []string {
	var a []string
	if uv {
		a = append(a, "--default-index", t.index.URL)
		for _, u := range t.index.ExtraURLs {
			a = append(a, "--index", u)
		}
	} else {
		a = append(a, "--index-url", t.index.URL)
		for _, u := range t.index.ExtraURLs {
			a = append(a, "--extra-index-url", u)
		}
	}
	for _, d := range t.findLinks {
		a = append(a, "--find-links", d)
	}
	if t.index.Offline {
		if uv {
			a = append(a, "--offline")
		} else {
			a = append(a, "--no-index")
		}
	}
	return a
}

func (b *uvBuilder) compileUV(ctx context.Context, run *runner, t target, dir string) ([]builder.Locked, error) {
	args := []string{"pip", "compile", "--no-progress", "--no-config", "--quiet",
		"--python-version", t.python, "--python-platform", t.platform,
		"--generate-hashes", "--only-binary", ":all:", "--no-header", "--no-annotate",
		"--cache-dir", run.cache, "--output-file", filepath.Join(dir, "lock.txt")}
	args = append(args, indexArgs(t, true)...)
	args = append(args, "--", filepath.Join(dir, "requirements.in"))
	if _, stderr, err := run.run(ctx, b.uv, args, nil); err != nil {
		return nil, resolveError(ctx, "uv", stderr, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "lock.txt"))
	if err != nil {
		return nil, fmt.Errorf("uv builder: uv wrote no lock: %w", err)
	}
	return parseLock(string(data))
}

var progressRe = regexp.MustCompile(`^(Prepared|Installed) ([0-9]+) packages?`)

func (b *uvBuilder) installUV(ctx context.Context, run *runner, t target, dir, site string, n int, report func(int, string)) error {
	args := []string{"pip", "install", "--no-progress", "--no-config",
		"--python-version", t.python, "--python-platform", t.platform,
		"--only-binary", ":all:", "--require-hashes", "--no-deps",
		"--target", site, "--cache-dir", run.cache}
	args = append(args, indexArgs(t, true)...)
	args = append(args, "-r", filepath.Join(dir, "lock.txt"))
	_, stderr, err := run.run(ctx, b.uv, args, func(line string) {
		if m := progressRe.FindStringSubmatch(line); m != nil {
			if m[1] == "Prepared" {
				report(2, fmt.Sprintf("downloaded %s of %d packages", m[2], n))
			} else {
				report(3, fmt.Sprintf("installed %s of %d packages", m[2], n))
			}
		}
	})
	if err != nil {
		return installError(ctx, "uv", stderr, err)
	}
	return nil
}

// pipPlatform turns uv's x86_64-manylinux_2_36 into pip's manylinux_2_36_x86_64.
func pipPlatform(p string) string {
	arch, tag, _ := strings.Cut(p, "-")
	return tag + "_" + arch
}

func (b *uvBuilder) pipArgs(t target, site string) []string {
	return []string{"-m", "pip", "install", "--isolated", "--no-input", "--disable-pip-version-check", "--no-color", "--progress-bar", "off",
		"--target", site, "--only-binary", ":all:", "--platform", pipPlatform(t.platform), "--python-version", t.python, "--implementation", "cp"}
}

type pipReport struct {
	Install []struct {
		DownloadInfo struct {
			URL         string `json:"url"`
			ArchiveInfo struct {
				Hashes map[string]string `json:"hashes"`
				Hash   string            `json:"hash"`
			} `json:"archive_info"`
		} `json:"download_info"`
		Metadata struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"metadata"`
	} `json:"install"`
}

func (b *uvBuilder) compilePip(ctx context.Context, run *runner, t target, dir string) ([]builder.Locked, error) {
	args := append(b.pipArgs(t, filepath.Join(dir, "dry-run")), "--dry-run", "--ignore-installed", "--report", filepath.Join(dir, "report.json"), "--cache-dir", run.cache)
	args = append(args, indexArgs(t, false)...)
	args = append(args, "-r", filepath.Join(dir, "requirements.in"))
	// pip explains a conflict on stdout ("The conflict is caused by").
	if stdout, stderr, err := run.run(ctx, b.python, args, nil); err != nil {
		return nil, resolveError(ctx, "pip", stdout+stderr, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return nil, fmt.Errorf("uv builder: pip wrote no report: %w", err)
	}
	var rep pipReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("uv builder: pip's report: %w", err)
	}
	var lock []builder.Locked
	for _, it := range rep.Install {
		h := it.DownloadInfo.ArchiveInfo.Hashes["sha256"]
		if h == "" {
			h = strings.TrimPrefix(it.DownloadInfo.ArchiveInfo.Hash, "sha256=")
		}
		if !hexRe.MatchString(h) {
			return nil, fmt.Errorf("uv builder: pip reported no sha256 for %s %s", it.Metadata.Name, it.Metadata.Version)
		}
		lock = append(lock, builder.Locked{Name: normalize(it.Metadata.Name), Version: it.Metadata.Version, Hashes: []string{"sha256:" + h}})
	}
	slices.SortFunc(lock, func(a, b builder.Locked) int { return strings.Compare(a.Name, b.Name) })
	return lock, nil
}

var pipInstalledRe = regexp.MustCompile(`^Successfully installed (.*)$`)

func (b *uvBuilder) installPip(ctx context.Context, run *runner, t target, dir, site string, n int, report func(int, string)) error {
	args := append(b.pipArgs(t, site), "--require-hashes", "--no-deps", "--cache-dir", run.cache)
	args = append(args, indexArgs(t, false)...)
	args = append(args, "-r", filepath.Join(dir, "lock.txt"))
	got := 0
	stdout, stderr, err := run.run(ctx, b.python, args, func(line string) {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "Collecting "):
			got++
			report(2, fmt.Sprintf("downloading %d of %d packages", got, n))
		case strings.HasPrefix(line, "Installing collected packages"):
			report(3, fmt.Sprintf("installing %d packages", n))
		case pipInstalledRe.MatchString(line):
			report(3, fmt.Sprintf("installed %d of %d packages", len(strings.Fields(pipInstalledRe.FindStringSubmatch(line)[1])), n))
		}
	})
	if err != nil {
		return installError(ctx, "pip", stdout+stderr, err)
	}
	return nil
}

var (
	hexRe     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	lockPinRe = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)`)
	lockHash  = regexp.MustCompile(`--hash=sha256:([0-9a-f]{64})`)
)

// parseLock reads uv's requirements lock: "name==version \" lines each
// followed by "--hash=sha256:..." lines.
func parseLock(text string) ([]builder.Locked, error) {
	var lock []builder.Locked
	for _, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if m := lockPinRe.FindStringSubmatch(s); m != nil {
			lock = append(lock, builder.Locked{Name: normalize(m[1]), Version: m[2]})
		}
		if len(lock) == 0 {
			continue
		}
		for _, h := range lockHash.FindAllStringSubmatch(s, -1) {
			lock[len(lock)-1].Hashes = append(lock[len(lock)-1].Hashes, "sha256:"+h[1])
		}
	}
	for _, l := range lock {
		if len(l.Hashes) == 0 {
			return nil, fmt.Errorf("uv builder: the lock has no sha256 for %s %s", l.Name, l.Version)
		}
	}
	if len(lock) == 0 {
		return nil, fmt.Errorf("uv builder: the lock is empty")
	}
	slices.SortFunc(lock, func(a, b builder.Locked) int { return strings.Compare(a.Name, b.Name) })
	return lock, nil
}

// lockFile is the lock as a --require-hashes requirements file; the same
// lock always gives the same text (its hash names the layer).
func lockFile(lock []builder.Locked) string {
	var s strings.Builder
	for _, l := range lock {
		s.WriteString(l.Name + "==" + l.Version)
		hs := slices.Clone(l.Hashes)
		slices.Sort(hs)
		for _, h := range hs {
			s.WriteString(" \\\n    --hash=" + h)
		}
		s.WriteString("\n")
	}
	return s.String()
}

var (
	noWheelRe = regexp.MustCompile(`([A-Za-z0-9][A-Za-z0-9._-]*)(?:==[^\s,]+)? has no usable wheels`)
	wheelsReq = regexp.MustCompile("Wheels are required for `([^`]+)`")
	// uv's explanations: a package (requested or a dependency) that no
	// source has, and a requested constraint no version meets (the first
	// and only step of the explanation).
	uvNotFound  = regexp.MustCompile(`(?i:because) ([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the (package registry|cache|provided package locations)`)
	uvNoVersion = regexp.MustCompile(`No solution found when resolving dependencies: \S+ Because (?:only \S+ is available|there (?:are|is) no versions? of \S+) and you require ([A-Za-z0-9][A-Za-z0-9._-]*?)([<>=!~][^\s,]*), we can conclude that your requirements are unsatisfiable`)
	pipNoMatch  = regexp.MustCompile(`No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)`)
)

// resolveError turns a failed resolution into a sentence naming the
// package and what to do; the tool's own explanation follows, masked.
func resolveError(ctx context.Context, tool, stderr string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, toolrun.ErrWriteLimit) {
		return err
	}
	out := mask(strings.TrimSpace(stderr))
	if m := wheelsReq.FindStringSubmatch(out); m != nil {
		return sdistOnly(m[1], out)
	}
	if m := noWheelRe.FindStringSubmatch(out); m != nil {
		return sdistOnly(m[1], out)
	}
	if m := pipNoMatch.FindStringSubmatch(out); m != nil {
		// pip cannot tell "no wheel" from "no such package" under
		// --only-binary; say both.
		return host.Errorf(host.KindInvalid, "package %s: no wheel for this Python and platform in the index (it may not exist, or be available only as a source distribution, which this builder never builds: no package code runs on the host). %s says: %s", m[1], tool, tail(out, 1500))
	}
	// uv wraps its explanation; the patterns below read it as one line.
	flat := strings.Join(strings.Fields(out), " ")
	if m := uvNotFound.FindStringSubmatch(flat); m != nil {
		if m[2] == "cache" {
			return host.Errorf(host.KindInvalid, "package %s is neither in the download cache nor in a find_links directory, and offline = true keeps the builder off the index: add its wheel to a find_links directory or build once online. %s says: %s", m[1], tool, tail(out, 1500))
		}
		return host.Errorf(host.KindInvalid, "package %s was not found in the %s: check the name, or ask an operator to configure the index that has it (environment_builder.index_url, extra_index_urls or find_links). %s says: %s", m[1], m[2], tool, tail(out, 1500))
	}
	if m := uvNoVersion.FindStringSubmatch(flat); m != nil {
		return host.Errorf(host.KindInvalid, "no version of package %s satisfies %s%s: relax the constraint or choose a version the index has. %s says: %s", m[1], m[1], m[2], tool, tail(out, 1500))
	}
	if strings.Contains(out, "No solution found") || strings.Contains(out, "ResolutionImpossible") || strings.Contains(out, "conflict") {
		return host.Errorf(host.KindInvalid, "the requested packages cannot be installed together (a version conflict): relax or drop one of the constraints %s names. %s says: %s", tool, tool, tail(out, 2000))
	}
	return fmt.Errorf("resolving with %s failed (%v): %s", tool, err, tail(out, 2000))
}

func sdistOnly(name, out string) error {
	return host.Errorf(host.KindInvalid, "package %s is available only as a source distribution (sdist), and this builder installs wheels only (--only-binary :all:, so no package code runs while building): choose a version or a package that publishes a wheel for this Python and platform. Resolver says: %s", name, tail(out, 1200))
}

func installError(ctx context.Context, tool, stderr string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, toolrun.ErrWriteLimit) {
		return err
	}
	out := mask(strings.TrimSpace(stderr))
	if strings.Contains(out, "hash") && (strings.Contains(out, "mismatch") || strings.Contains(out, "do not match") || strings.Contains(out, "DO NOT MATCH")) {
		return host.Errorf(host.KindInvalid, "a downloaded package does not match the hash in the lock (the index served different bytes for the same version): refusing it. %s says: %s", tool, tail(out, 1500))
	}
	return fmt.Errorf("installing with %s failed (%v): %s", tool, err, tail(out, 2000))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

var userinfoRe = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@`)

// mask removes user:password@ from every URL in s: index credentials never
// reach a log, an error or the audit.
func mask(s string) string { return userinfoRe.ReplaceAllString(s, "${1}***@") }

// stripCredentials is an index URL as it enters a cache key.
func stripCredentials(u string) string { return userinfoRe.ReplaceAllString(u, "${1}") }

// runner runs uv or pip in its own process group with a minimal
// environment: no host user config, no proxy settings, no credentials but
// those in the URLs given.
type runner struct {
	b     *uvBuilder
	home  string
	cache string
	max   int64 // bytes each run may write (BuildRequest.MaxBytes); 0: no limit
}

func (r *runner) env() []string {
	return []string{
		"PATH=" + minimalPath,
		"HOME=" + r.home,
		"LANG=C.UTF-8",
		"UV_NO_CONFIG=1",
		"UV_PYTHON_DOWNLOADS=never",
		"UV_CACHE_DIR=" + r.cache,
		"PIP_CONFIG_FILE=/dev/null",
		"PIP_NO_INPUT=1",
		"PYTHONNOUSERSITE=1",
		"NO_COLOR=1",
		"XDG_CONFIG_HOME=" + filepath.Join(r.home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(r.home, ".cache"),
		// Temporary files (pip unpacks --target installs there first) stay
		// in the build's scratch directory: removed with it, and counted.
		"TMPDIR=" + filepath.Join(r.home, "tmp"),
	}
}

// run runs a tool; onLine sees each stderr and stdout line as it comes.
func (r *runner) run(ctx context.Context, bin string, args []string, onLine func(string)) (string, string, error) {
	r.b.log.Debug("running", "tool", filepath.Base(bin), "args", mask(strings.Join(args, " ")))
	r.b.storage.RLock()
	defer r.b.storage.RUnlock()
	start := time.Now()
	so, se, err := toolrun.Run(ctx, toolrun.Cmd{Bin: bin, Args: args, Env: r.env(), Dir: r.home, Timeout: r.b.timeout, Keep: 1 << 20, OnLine: onLine, MaxWrite: r.max})
	r.b.log.Info("ran", "tool", filepath.Base(bin), "command", args[0]+" "+args[1], "ms", time.Since(start).Milliseconds(), "error", err)
	return so, se, err
}

func sameFilesystem(a, b string) bool {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return true // no evidence of a difference: no warning
	}
	return sa.Dev == sb.Dev
}

// mkdirAll0755 makes dir and its parents up to and including root with
// mode 0755.
func mkdirAll0755(root, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
		if d == root || d == filepath.Dir(d) {
			return nil
		}
	}
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// tooLarge turns a build stopped at its size limit into the refusal, after
// removing what the build added to the cache (its scratch directory goes
// with the build): nothing of a refused build stays on disk. Other errors
// pass.
func (b *uvBuilder) tooLarge(err error, cache string, before map[string]bool, max int64) error {
	if !errors.Is(err, toolrun.ErrWriteLimit) {
		return err
	}
	b.storage.Lock()
	removed := 0
	for p := range cacheEntries(cache) {
		if !before[p] {
			if os.RemoveAll(p) == nil {
				removed++
			}
		}
	}
	b.storage.Unlock()
	b.log.Warn("build stopped at its size limit", "max_bytes", max, "error", err, "cache_entries_removed", removed)
	return host.Errorf(host.KindTooLarge, "the packages unpack to more than the %d bytes this build may write (%v); what it wrote was removed", max, err)
}

// cacheEntries are the cache's units: every entry of its top-level
// directories (uv's archive-v0/<id>, wheels-v5/<index>, …) and its
// top-level entries themselves (a temporary directory, a new bucket).
func cacheEntries(cache string) map[string]bool {
	out := map[string]bool{}
	top, _ := os.ReadDir(cache)
	for _, t := range top {
		p := filepath.Join(cache, t.Name())
		out[p] = true
		if !t.IsDir() {
			continue
		}
		sub, _ := os.ReadDir(p)
		for _, s := range sub {
			out[filepath.Join(p, s.Name())] = true
		}
	}
	return out
}

// prune applies environment_builder.storage to the layers and the cache:
// entries unused for longer than MaxAge, then the least recently used until
// all take at most MaxBytes; never the layer of this build (keep) nor
// anything used within pruneGrace. A layer was last used when its
// lock.json was last touched (built or a cache hit); a cache entry, when it
// was last modified.
func (b *uvBuilder) prune(root, cache, keep string, l builder.Prune) {
	if l.MaxAge <= 0 && l.MaxBytes <= 0 {
		return
	}
	b.storage.Lock()
	defer b.storage.Unlock()
	layers, err := prune.Children(func(p string) time.Time {
		if st, err := os.Stat(filepath.Join(p, "lock.json")); err == nil {
			return st.ModTime()
		}
		return time.Time{}
	}, filepath.Join(root, "layers"))
	if err != nil {
		b.log.Warn("pruning: cannot read the layers", "error", err)
		return
	}
	var cached []prune.Entry
	top, _ := os.ReadDir(cache)
	for _, t := range top {
		if !t.IsDir() {
			continue // CACHEDIR.TAG, .gitignore, uv's lock
		}
		es, err := prune.Children(nil, filepath.Join(cache, t.Name()))
		if err != nil {
			b.log.Warn("pruning: cannot read the cache", "dir", t.Name(), "error", err)
			return
		}
		cached = append(cached, es...)
	}
	all := append(layers, cached...)
	rm, before, after := prune.Plan(all, time.Now(), prune.Limits{MaxAge: l.MaxAge, MaxBytes: l.MaxBytes, Grace: pruneGrace, Keep: map[string]bool{keep: true}})
	for _, e := range rm {
		if err := os.RemoveAll(e.Path); err != nil {
			b.log.Warn("pruning: cannot remove", "path", e.Path, "error", err)
		}
	}
	if len(rm) > 0 {
		b.log.Info("pruned layers and cache", "removed", len(rm), "bytes_before", before, "bytes_after", after, "max_bytes", l.MaxBytes, "max_age", l.MaxAge)
	}
}
