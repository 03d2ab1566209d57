package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/plugins/internal/toolrun"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

// Info identifies this plugin; its version is part of every cache key.
var Info = plugin.Info{Name: "debian", Version: "0.1.0", Description: "Python (python3-*) and R (r-cran-*) environments from the base image's Debian release: apt resolves, apt-get download fetches, dpkg-deb -x unpacks (no maintainer script runs)", Config: Config{}}

// Config is [plugins.debian.config].
type Config struct {
	// StatusFile is a dpkg status file describing the base image's
	// installed packages. Empty (the default): the builder asks the core
	// for a container of the base image that runs dpkg-query once per
	// image id, and keeps the answer in its work directory.
	StatusFile string `json:"status_file"`
	// Release is the base image's Debian codename when StatusFile is set
	// (default: the host's): it must match the host's apt lists.
	Release string `json:"release"`
	// AptLists is the host's apt lists directory (default
	// /var/lib/apt/lists): the archive's state the resolution uses.
	AptLists string `json:"apt_lists"`
	// Timeout bounds each apt or dpkg-deb process (default 10m).
	Timeout string `json:"timeout"`
}

const defaultLists = "/var/lib/apt/lists"

var steps = []string{"resolve", "download", "install", "done"}

const minimalPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// prefixes are the Debian name prefixes of each language's packages.
var prefixes = map[string][]string{
	"python": {"python3-"},
	"r":      {"r-cran-", "r-bioc-"},
}

var (
	debNameRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,127}$`)
	debVersionRe = regexp.MustCompile(`^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*$`)
	codenameRe   = regexp.MustCompile(`^[a-z]+$`)
)

type debBuilder struct {
	// missing says which host tool is absent: the plugin still loads (a
	// server on a non-Debian host starts) but refuses every build with it.
	missing error
	h       host.Host
	cfg     Config
	dir     string // the work directory (builder.WorkDir): layers and debs live in dir/debian
	lists   string
	timeout time.Duration
	log     hclog.Logger
}

// New is the plugin factory.
func New(h host.Host, raw backend.Config) (builder.Builder, error) {
	var cfg Config
	if err := raw.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("debian builder configuration: %w", err)
	}
	dir, err := builder.WorkDir()
	if err != nil {
		return nil, fmt.Errorf("debian builder: %w", err)
	}
	return newBuilder(h, cfg, dir)
}

func newBuilder(h host.Host, cfg Config, dir string) (*debBuilder, error) {
	b := &debBuilder{h: h, cfg: cfg, dir: dir, lists: cfg.AptLists, timeout: 10 * time.Minute,
		log: hclog.New(&hclog.LoggerOptions{Name: "debian-builder", Output: os.Stderr, Level: hclog.Info})}
	if b.lists == "" {
		b.lists = defaultLists
	}
	if !filepath.IsAbs(b.lists) {
		return nil, fmt.Errorf("debian builder: apt_lists %q is not an absolute path", b.lists)
	}
	if cfg.StatusFile != "" && !filepath.IsAbs(cfg.StatusFile) {
		return nil, fmt.Errorf("debian builder: status_file %q is not an absolute path", cfg.StatusFile)
	}
	if cfg.Release != "" && !codenameRe.MatchString(cfg.Release) {
		return nil, fmt.Errorf("debian builder: release %q is not a Debian codename (e.g. bookworm)", cfg.Release)
	}
	if cfg.Timeout != "" {
		d, err := time.ParseDuration(cfg.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("debian builder: timeout %q is not a positive duration (e.g. 10m)", cfg.Timeout)
		}
		b.timeout = d
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := lookPath(tool); err != nil && b.missing == nil {
			b.missing = host.Errorf(host.KindUnavailable, "the debian builder cannot build here: %s is not installed (%v); it needs a Debian host with apt and dpkg", tool, err)
			b.log.Warn("builds will be refused", "reason", b.missing)
		}
	}
	return b, nil
}

func lookPath(name string) (string, error) {
	for _, d := range filepath.SplitList(minimalPath) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in %s", name, minimalPath)
}

// debianName maps a requested package to its Debian package: "ggplot2" is
// r-cran-ggplot2 for R, "requests" python3-requests for Python; a full
// Debian name of the language's prefix is taken as it is.
func debianName(language, name string) (string, error) {
	n := strings.ToLower(name)
	for _, p := range prefixes[language] {
		if strings.HasPrefix(n, p) {
			if !debNameRe.MatchString(n) {
				return "", fmt.Errorf("package %q is not a Debian package name", name)
			}
			return n, nil
		}
	}
	if language == "python" {
		// Debian names Python modules in lower case with '-' for '_'
		// (python3-dateutil, python3-typing-extensions).
		n = strings.ReplaceAll(n, "_", "-")
	}
	n = prefixes[language][0] + n
	if !debNameRe.MatchString(n) {
		return "", fmt.Errorf("package %q does not map to a Debian package name (%q)", name, n)
	}
	return n, nil
}

// debianVersion is the apt version pin of a constraint: Debian has one
// version of each package per release, so only an exact Debian version
// ("==2.5.1-1" or "2.5.1-1") or none is meaningful.
func debianVersion(pkg, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	exact := strings.TrimPrefix(v, "==")
	if !debVersionRe.MatchString(exact) || strings.Contains(exact, ",") {
		return "", fmt.Errorf("package %s: version %q: the debian builder installs the release's version of a package; leave the version empty or pin an exact Debian version with ==VERSION (e.g. ==2.5.1-1)", pkg, v)
	}
	return exact, nil
}

// Plan maps the packages to Debian names and keys the build on the base
// image, the archive's state (the apt lists' Release files) and the names.
func (b *debBuilder) Plan(_ context.Context, r builder.PlanRequest) (builder.Plan, error) {
	if err := r.Validate(); err != nil {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "%s", err.Error())
	}
	if b.missing != nil {
		return builder.Plan{}, b.missing
	}
	if _, ok := prefixes[r.Language]; !ok {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "the debian builder builds python (python3-*) and r (r-cran-*) environments, not %q", r.Language)
	}
	if len(r.Packages) == 0 {
		return builder.Plan{}, host.Errorf(host.KindInvalid, "the spec names no package")
	}
	pkgs := make([]builder.Package, 0, len(r.Packages))
	seen := map[string]bool{}
	for _, p := range r.Packages {
		if len(p.Extras) > 0 {
			// A Debian package has no optional features to select: building
			// it without the extras would be building something else.
			return builder.Plan{}, host.Errorf(host.KindInvalid, "package %s[%s]: the debian builder cannot install extras (a Debian package has none; its optional parts are separate packages, e.g. python3-%s-<feature>): request the packages the extra needs by name, or use the uv builder",
				p.Name, strings.Join(p.Extras, ","), strings.ToLower(p.Name))
		}
		n, err := debianName(r.Language, p.Name)
		if err != nil {
			return builder.Plan{}, host.Errorf(host.KindInvalid, "%s", err.Error())
		}
		v, err := debianVersion(n, p.Version)
		if err != nil {
			return builder.Plan{}, host.Errorf(host.KindInvalid, "%s", err.Error())
		}
		if seen[n] {
			return builder.Plan{}, host.Errorf(host.KindInvalid, "package %s is requested twice (as %s and another spelling)", n, p.Name)
		}
		seen[n] = true
		pkgs = append(pkgs, builder.Package{Name: n, Version: v})
	}
	slices.SortFunc(pkgs, func(a, b builder.Package) int { return strings.Compare(a.Name, b.Name) })
	archive, err := b.archiveState()
	if err != nil {
		return builder.Plan{}, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "builder %s %s\nimage %q %q\nlanguage %q\narchive %s\nstatus %q\n", Info.Name, Info.Version, r.BaseImage, r.BaseImageID, r.Language, archive, b.cfg.StatusFile)
	for _, p := range pkgs {
		fmt.Fprintf(h, "pkg %q %q\n", p.Name, p.Version)
	}
	plan := builder.Plan{CacheKey: "sha256:" + hex.EncodeToString(h.Sum(nil)), Packages: pkgs, Steps: slices.Clone(steps)}
	if r.Index.URL != "" || len(r.Index.ExtraURLs) > 0 {
		plan.Warnings = append(plan.Warnings, "the debian builder ignores package index settings: packages come from the host's apt sources")
	}
	return plan, nil
}

// archiveState hashes the apt lists' Release files: an archive update
// changes what a name resolves to, so it changes the key.
func (b *debBuilder) archiveState() (string, error) {
	var names []string
	for _, pat := range []string{"*_InRelease", "*_Release"} {
		m, _ := filepath.Glob(filepath.Join(b.lists, pat))
		names = append(names, m...)
	}
	if len(names) == 0 {
		return "", host.Errorf(host.KindUnavailable, "the debian builder finds no apt lists in %s: run apt-get update on the host", b.lists)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return "", fmt.Errorf("debian builder: %w", err)
		}
		fmt.Fprintf(h, "%s %x\n", filepath.Base(n), sha256.Sum256(data))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// inst is a package apt would install.
type inst struct {
	Name, Version, Arch string
	SHA256              string
	File                string // in the deb cache
}

// Build resolves against the base image's packages, fetches what it lacks
// and unpacks it into a layer keyed by the lock's hash.
func (b *debBuilder) Build(ctx context.Context, r builder.BuildRequest, progress func(builder.Progress)) (builder.BuildResult, error) {
	plan, err := b.Plan(ctx, r.Spec)
	if err != nil {
		return builder.BuildResult{}, err
	}
	if plan.CacheKey != r.CacheKey {
		return builder.BuildResult{}, host.Errorf(host.KindInvalid, "cache key %q is not this spec's (%q): plan the spec again", r.CacheKey, plan.CacheKey)
	}
	report := func(step int, msg string) {
		if progress != nil && ctx.Err() == nil {
			progress(builder.Progress{Phase: steps[step-1], Step: step, Steps: len(steps), Message: msg})
		}
	}
	root := filepath.Join(b.dir, "debian")
	debs := filepath.Join(root, "debs")
	for _, d := range []string{filepath.Join(root, "tmp"), filepath.Join(root, "layers"), filepath.Join(root, "status"), debs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
		}
	}
	scratch, err := os.MkdirTemp(filepath.Join(root, "tmp"), "build-")
	if err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	defer os.RemoveAll(scratch)
	res := builder.BuildResult{CacheKey: plan.CacheKey, Warnings: slices.Clone(plan.Warnings)}

	report(1, fmt.Sprintf("reading the installed packages of %s", r.Spec.BaseImage))
	status, release, err := b.baseStatus(ctx, r.Spec, filepath.Join(root, "status"))
	if err != nil {
		return builder.BuildResult{}, err
	}
	hostRelease, err := osRelease("/etc/os-release")
	if err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: the host's release: %w", err)
	}
	if release != hostRelease {
		return builder.BuildResult{}, host.Errorf(host.KindInvalid, "base image %s is Debian %q but the host's apt lists are for %q: the debian builder fetches the host release's packages, which would not fit the image; build on a %s host or use another builder", r.Spec.BaseImage, release, hostRelease, release)
	}
	// The resolution is a function of the plan's key (image id, archive
	// state, packages) and the image's status: remembered, an identical
	// request is a cache hit without running apt.
	memo, err := memoPath(root, plan.CacheKey, status)
	if err != nil {
		return builder.BuildResult{}, err
	}
	if hit, ok := readMemo(root, memo); ok {
		hit.CacheKey, hit.Warnings = plan.CacheKey, append(res.Warnings, hit.Warnings...)
		hit.Warnings = append(hit.Warnings, "cache hit: the layer of this request was built before")
		report(4, fmt.Sprintf("cache hit: %d packages already unpacked", len(hit.Lock)))
		return hit, ctx.Err()
	}
	run := &runner{timeout: b.timeout, log: b.log, dir: scratch}
	apt := b.aptOptions(root, status, scratch)
	report(1, fmt.Sprintf("resolving %d packages with apt against %s", len(plan.Packages), r.Spec.BaseImage))
	todo, already, err := b.resolve(ctx, run, apt, plan.Packages)
	if err != nil {
		return builder.BuildResult{}, err
	}
	for _, a := range already {
		res.Warnings = append(res.Warnings, a+" is already in the base image: nothing added for it")
	}
	if err := b.hashes(ctx, run, apt, todo); err != nil {
		return builder.BuildResult{}, err
	}
	for _, p := range todo {
		res.Lock = append(res.Lock, builder.Locked{Name: p.Name, Version: p.Version, Hashes: []string{"sha256:" + p.SHA256}})
	}
	lockText, _ := json.Marshal(res.Lock)
	sum := sha256.Sum256(append([]byte(Info.Name+" "+Info.Version+" "+release+"\n"), lockText...))
	lockHash := hex.EncodeToString(sum[:])[:32]
	layer := filepath.Join(root, "layers", lockHash)
	res.Dir = filepath.Join("debian", "layers", lockHash, "tree")
	if st, err := os.Stat(filepath.Join(layer, "lock.json")); err == nil && st.Mode().IsRegular() {
		if res.SizeBytes, err = dirSize(filepath.Join(layer, "tree")); err != nil {
			return builder.BuildResult{}, fmt.Errorf("debian builder: cached layer %s: %w", lockHash, err)
		}
		writeMemo(memo, res)
		res.Warnings = append(res.Warnings, "cache hit: the layer of this lock was built before ("+lockHash+")")
		report(4, fmt.Sprintf("cache hit: %d packages already unpacked", len(todo)))
		return res, ctx.Err()
	}

	if err := b.download(ctx, run, apt, debs, todo, report); err != nil {
		return builder.BuildResult{}, err
	}
	tree := filepath.Join(scratch, "layer", "tree")
	// The tree's root is laid over /: 0755 whatever this process's umask
	// (the directories inside come from the packages with their modes).
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	if err := os.Chmod(tree, 0o755); err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	dpkgDeb, _ := lookPath("dpkg-deb")
	for i, p := range todo {
		report(3, fmt.Sprintf("unpacking %d of %d: %s %s", i+1, len(todo), p.Name, p.Version))
		// -x only unpacks the data archive: no maintainer script, no
		// trigger, nothing of the package runs.
		// Bounded by what the build may still write: no file of the package
		// grows past it (RLIMIT_FSIZE, inherited by dpkg-deb's tar), and the
		// tree is measured after each package. The scratch directory, and so
		// all of it, goes with a refused build.
		var left int64
		if r.MaxBytes > 0 {
			used, err := dirSize(tree)
			if err != nil {
				return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
			}
			if left = r.MaxBytes - used; left <= 0 {
				return builder.BuildResult{}, host.Errorf(host.KindTooLarge, "the packages unpack to %d bytes, more than the %d this build may write (stopped before %s); what it wrote was removed", used, r.MaxBytes, p.Name)
			}
		}
		if _, se, err := run.runLimited(ctx, dpkgDeb, []string{"--extract", p.File, tree}, left); err != nil {
			if ctx.Err() != nil {
				return builder.BuildResult{}, ctx.Err()
			}
			if errors.Is(err, toolrun.ErrWriteLimit) || strings.Contains(se, "File too large") || strings.Contains(se, "File size limit exceeded") {
				return builder.BuildResult{}, host.Errorf(host.KindTooLarge, "package %s unpacks to more than the %d bytes this build may still write (of %d); what it wrote was removed", p.Name, left, r.MaxBytes)
			}
			return builder.BuildResult{}, fmt.Errorf("debian builder: dpkg-deb -x %s: %v: %s", filepath.Base(p.File), err, tail(se, 800))
		}
	}
	if r.MaxBytes > 0 {
		if used, err := dirSize(tree); err != nil || used > r.MaxBytes {
			return builder.BuildResult{}, host.Errorf(host.KindTooLarge, "the packages unpack to %d bytes, more than the %d this build may write; what it wrote was removed", used, r.MaxBytes)
		}
	}
	if err := dropSetID(tree); err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	meta, _ := json.MarshalIndent(map[string]any{"cache_key": plan.CacheKey, "release": release, "language": r.Spec.Language, "lock": res.Lock}, "", "  ")
	if err := os.WriteFile(filepath.Join(scratch, "layer", "lock.json"), meta, 0o644); err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return builder.BuildResult{}, err
	}
	if err := os.Rename(filepath.Join(scratch, "layer"), layer); err != nil && !isExist(err) {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	if res.SizeBytes, err = dirSize(filepath.Join(layer, "tree")); err != nil {
		return builder.BuildResult{}, fmt.Errorf("debian builder: %w", err)
	}
	writeMemo(memo, res)
	report(4, fmt.Sprintf("unpacked %d packages (%d bytes)", len(todo), res.SizeBytes))
	return res, nil
}

// memoPath names the remembered result of a plan against a status file.
func memoPath(root, key, status string) (string, error) {
	data, err := os.ReadFile(status)
	if err != nil {
		return "", fmt.Errorf("debian builder: the base image's status: %w", err)
	}
	sum := sha256.Sum256(append([]byte(key+"\n"), data...))
	return filepath.Join(root, "resolved", hex.EncodeToString(sum[:])[:32]+".json"), nil
}

// readMemo returns a remembered result whose layer is still there.
func readMemo(root, memo string) (builder.BuildResult, bool) {
	data, err := os.ReadFile(memo)
	if err != nil {
		return builder.BuildResult{}, false
	}
	var res builder.BuildResult
	if json.Unmarshal(data, &res) != nil || !strings.HasPrefix(res.Dir, filepath.Join("debian", "layers")+"/") || strings.Contains(res.Dir, "..") {
		return builder.BuildResult{}, false
	}
	layer := filepath.Join(filepath.Dir(root), filepath.Dir(res.Dir))
	if st, err := os.Stat(filepath.Join(layer, "lock.json")); err != nil || !st.Mode().IsRegular() {
		return builder.BuildResult{}, false
	}
	size, err := dirSize(filepath.Join(layer, "tree"))
	if err != nil {
		return builder.BuildResult{}, false
	}
	res.SizeBytes = size
	return res, true
}

// writeMemo remembers a result (its warnings are the resolution's: what
// the image already had). A failure only costs the next build a resolve.
func writeMemo(memo string, res builder.BuildResult) {
	res.CacheKey = ""
	res.Warnings = slices.DeleteFunc(slices.Clone(res.Warnings), func(w string) bool { return !strings.Contains(w, "already in the base image") })
	data, _ := json.Marshal(res)
	if err := os.MkdirAll(filepath.Dir(memo), 0o755); err == nil {
		_ = writeAtomic(memo, data)
	}
}

func isExist(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && (errors.Is(le.Err, syscall.ENOTEMPTY) || errors.Is(le.Err, syscall.EEXIST))
}

// statusScript prints the image's dpkg status file whole (apt merges an
// installed version with the archive's only when every dependency field
// matches, so a trimmed status would make apt "upgrade" everything), then
// the image's release.
const statusScript = `cat /var/lib/dpkg/status && echo && echo '=== release' && . /etc/os-release && echo "$VERSION_CODENAME"`

// baseStatus is the base image's dpkg status (a file path) and release:
// from configuration, or from a container of the image the core runs
// (network-less, read-only, like every sandbox), once per image id.
func (b *debBuilder) baseStatus(ctx context.Context, r builder.PlanRequest, dir string) (string, string, error) {
	if b.cfg.StatusFile != "" {
		rel := b.cfg.Release
		if rel == "" {
			var err error
			if rel, err = osRelease("/etc/os-release"); err != nil {
				return "", "", fmt.Errorf("debian builder: %w", err)
			}
		}
		return b.cfg.StatusFile, rel, nil
	}
	var cached string
	if r.BaseImageID != "" {
		sum := sha256.Sum256([]byte(r.BaseImageID))
		cached = filepath.Join(dir, hex.EncodeToString(sum[:])[:32])
		st, err1 := os.ReadFile(cached + ".release")
		if _, err2 := os.Stat(cached + ".status"); err1 == nil && err2 == nil {
			return cached + ".status", strings.TrimSpace(string(st)), nil
		}
	}
	if b.h == nil {
		return "", "", host.Errorf(host.KindUnavailable, "the debian builder has no host services to read %s's packages: set status_file", r.BaseImage)
	}
	out, err := b.queryImage(ctx, r.BaseImage)
	if err != nil {
		return "", "", err
	}
	status, release, ok := strings.Cut(out, "=== release\n")
	release = strings.TrimSpace(release)
	if !ok || !codenameRe.MatchString(release) || !strings.Contains(status, "Package: ") {
		return "", "", fmt.Errorf("debian builder: %s did not describe its packages (is it a Debian image?): %s", r.BaseImage, tail(out, 400))
	}
	if cached == "" {
		cached = filepath.Join(dir, "nocache-"+strings.ReplaceAll(strings.ReplaceAll(r.BaseImage, "/", "_"), ":", "_"))
	}
	if err := writeAtomic(cached+".status", []byte(status)); err != nil {
		return "", "", err
	}
	if err := writeAtomic(cached+".release", []byte(release+"\n")); err != nil {
		return "", "", err
	}
	return cached + ".status", release, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("debian builder: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("debian builder: %w", err)
	}
	return nil
}

func (b *debBuilder) queryImage(ctx context.Context, image string) (string, error) {
	sb := b.h.Sandbox()
	c, err := sb.Create(ctx, host.Intent{Image: image, Command: []string{"sh", "-c", statusScript}, Timeout: 2 * time.Minute,
		Labels: map[string]string{"io.mcp-forge.builder": "debian-status"}})
	if err != nil {
		return "", fmt.Errorf("debian builder: a container of %s to list its packages: %w", image, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		sb.Remove(rctx, c.ID)
	}()
	if err := sb.Start(ctx, c.ID); err != nil {
		return "", fmt.Errorf("debian builder: starting the package listing of %s: %w", image, err)
	}
	w, err := sb.Wait(ctx, c.ID, 2*time.Minute)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", fmt.Errorf("debian builder: the package listing of %s: %w", image, err)
	}
	out, err := sb.Logs(ctx, c.ID, host.MaxFileBytes)
	if err != nil {
		return "", fmt.Errorf("debian builder: the package listing of %s: %w", image, err)
	}
	if w.ExitCode != 0 || w.TimedOut {
		return "", fmt.Errorf("debian builder: listing the packages of %s failed (exit %d %s): %s", image, w.ExitCode, w.Message, tail(string(out.Stderr), 400))
	}
	return string(out.Stdout), nil
}

func osRelease(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok {
			return strings.Trim(v, `"'`), nil
		}
	}
	return "", fmt.Errorf("%s has no VERSION_CODENAME", path)
}

// aptOptions point apt at the image's status instead of the host's, and
// at private caches, leaving the host's package state alone.
func (b *debBuilder) aptOptions(root, status, scratch string) []string {
	// apt's binary caches are kept per status file: rebuilding them from
	// the lists takes seconds; apt revalidates them against the lists and
	// the status file on every run.
	sum := sha256.Sum256([]byte(status))
	cache := filepath.Join(root, "apt-cache", hex.EncodeToString(sum[:])[:16])
	os.MkdirAll(cache, 0o755) // apt says what is wrong if this failed
	return []string{
		"-o", "Dir::State::status=" + status,
		"-o", "Dir::State::extended_states=" + filepath.Join(scratch, "extended_states"),
		"-o", "Dir::State::Lists=" + b.lists,
		"-o", "Dir::Cache=" + cache,
		// Debian's container images disable these caches (docker-clean).
		"-o", "Dir::Cache::pkgcache=pkgcache.bin", "-o", "Dir::Cache::srcpkgcache=srcpkgcache.bin",
		"-o", "Dir::Cache::archives=" + filepath.Join(scratch, "archives"),
		"-o", "Debug::NoLocking=1",
		"-o", "APT::Install-Recommends=false",
		"-o", "APT::Install-Suggests=false",
		"-o", "APT::Get::AllowUnauthenticated=false",
	}
}

var (
	instRe    = regexp.MustCompile(`^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) .*\[([a-z0-9-]+)\]\)`)
	newestRe  = regexp.MustCompile(`^(\S+) is already the newest version`)
	noPkgRe   = regexp.MustCompile(`E: (?:Unable to locate package |Package '?)(\S+?)'?(?: has no installation candidate)?$`)
	noVerRe   = regexp.MustCompile(`E: Version '([^']+)' for '([^']+)' was not found`)
	getLineRe = regexp.MustCompile(`^Get:([0-9]+) `)
)

// resolve asks apt what installing the packages on the image would
// install (a simulation: nothing runs, nothing is written to the host).
func (b *debBuilder) resolve(ctx context.Context, run *runner, apt []string, pkgs []builder.Package) ([]inst, []string, error) {
	args := append([]string{"install", "--simulate", "--quiet", "--no-install-recommends"}, apt...)
	args = append(args, "--")
	for _, p := range pkgs {
		if p.Version != "" {
			args = append(args, p.Name+"="+p.Version)
		} else {
			args = append(args, p.Name)
		}
	}
	aptGet, _ := lookPath("apt-get")
	so, se, err := run.run(ctx, aptGet, args, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		out := strings.TrimSpace(se)
		for _, line := range strings.Split(out, "\n") {
			if m := noVerRe.FindStringSubmatch(line); m != nil {
				return nil, nil, host.Errorf(host.KindInvalid, "package %s has no version %s in the host's Debian release: leave the version empty for the release's version", m[2], m[1])
			}
			if m := noPkgRe.FindStringSubmatch(line); m != nil {
				return nil, nil, host.Errorf(host.KindInvalid, "package %s is not in the host's Debian release (the debian builder maps Python names to python3-NAME and R names to r-cran-NAME; give the full Debian name if it differs, or use another builder)", m[1])
			}
		}
		if strings.Contains(so+se, "Unable to correct problems") || strings.Contains(so+se, "unmet dependencies") {
			return nil, nil, host.Errorf(host.KindInvalid, "apt cannot install these packages together on %s (a dependency conflict): %s", "the base image", tail(strings.TrimSpace(so+"\n"+se), 1500))
		}
		return nil, nil, fmt.Errorf("debian builder: apt-get --simulate: %v: %s", err, tail(out, 1500))
	}
	var todo []inst
	var already []string
	for _, line := range strings.Split(so, "\n") {
		if m := instRe.FindStringSubmatch(line); m != nil {
			todo = append(todo, inst{Name: m[1], Version: m[2], Arch: m[3]})
		} else if m := newestRe.FindStringSubmatch(line); m != nil {
			already = append(already, m[1])
		}
	}
	slices.SortFunc(todo, func(a, b inst) int { return strings.Compare(a.Name, b.Name) })
	return todo, already, nil
}

// hashes fills each package's sha256 from the archive's signed index.
func (b *debBuilder) hashes(ctx context.Context, run *runner, apt []string, todo []inst) error {
	if len(todo) == 0 {
		return nil
	}
	args := append([]string{"show", "--no-all-versions"}, apt...)
	args = append(args, "--")
	for _, p := range todo {
		args = append(args, p.Name+"="+p.Version)
	}
	aptCache, _ := lookPath("apt-cache")
	so, se, err := run.run(ctx, aptCache, args, nil)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("debian builder: apt-cache show: %v: %s", err, tail(se, 800))
	}
	type key struct{ n, v string }
	sums := map[key]string{}
	for _, stanza := range strings.Split(so, "\n\n") {
		var n, v, s string
		for _, line := range strings.Split(stanza, "\n") {
			switch {
			case strings.HasPrefix(line, "Package: "):
				n = strings.TrimPrefix(line, "Package: ")
			case strings.HasPrefix(line, "Version: "):
				v = strings.TrimPrefix(line, "Version: ")
			case strings.HasPrefix(line, "SHA256: "):
				s = strings.TrimPrefix(line, "SHA256: ")
			}
		}
		if n != "" && s != "" {
			sums[key{n, v}] = s
		}
	}
	for i := range todo {
		s := sums[key{todo[i].Name, todo[i].Version}]
		if len(s) != 64 {
			return fmt.Errorf("debian builder: the archive index has no sha256 for %s %s", todo[i].Name, todo[i].Version)
		}
		todo[i].SHA256 = s
	}
	return nil
}

// debFile is the name apt-get download gives a package (':' of an epoch
// escaped as %3a).
func debFile(p inst) string {
	return p.Name + "_" + strings.ReplaceAll(url.PathEscape(p.Version), ":", "%3a") + "_" + p.Arch + ".deb"
}

// download fetches what the deb cache lacks with apt-get download, then
// checks every file against the index's sha256.
func (b *debBuilder) download(ctx context.Context, run *runner, apt []string, debs string, todo []inst, report func(int, string)) error {
	var missing []string
	have := 0
	for i := range todo {
		todo[i].File = filepath.Join(debs, debFile(todo[i]))
		if ok, _ := fileSHA256(todo[i].File, todo[i].SHA256); ok {
			have++
			continue
		}
		os.Remove(todo[i].File)
		missing = append(missing, todo[i].Name+"="+todo[i].Version)
	}
	report(2, fmt.Sprintf("downloading %d of %d packages (%d cached)", 0, len(missing), have))
	if len(missing) > 0 {
		// Into a scratch directory first: a cancelled download leaves no
		// partial .deb in the cache.
		dl := filepath.Join(run.dir, "download")
		if err := os.MkdirAll(dl, 0o755); err != nil {
			return fmt.Errorf("debian builder: %w", err)
		}
		args := append([]string{"download"}, apt...)
		args = append(args, "--")
		args = append(args, missing...)
		aptGet, _ := lookPath("apt-get")
		got := 0
		sub := *run
		sub.dir = dl
		_, se, err := sub.run(ctx, aptGet, args, func(line string) {
			if getLineRe.MatchString(line) {
				got++
				f := strings.Fields(line)
				name := ""
				if len(f) > 4 {
					name = f[4]
				}
				report(2, fmt.Sprintf("downloaded %d of %d packages %s", got, len(missing), name))
			}
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("debian builder: apt-get download: %v: %s", err, tail(se, 1200))
		}
		entries, err := os.ReadDir(dl)
		if err != nil {
			return fmt.Errorf("debian builder: %w", err)
		}
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".deb") {
				if err := os.Rename(filepath.Join(dl, e.Name()), filepath.Join(debs, e.Name())); err != nil {
					return fmt.Errorf("debian builder: %w", err)
				}
			}
		}
	}
	for _, p := range todo {
		ok, err := fileSHA256(p.File, p.SHA256)
		if err != nil {
			return fmt.Errorf("debian builder: %s %s was not downloaded as %s: %w", p.Name, p.Version, filepath.Base(p.File), err)
		}
		if !ok {
			os.Remove(p.File)
			return host.Errorf(host.KindInvalid, "package %s %s does not match the sha256 of the archive's index: refusing it", p.Name, p.Version)
		}
	}
	return nil
}

func fileSHA256(path, want string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hex.EncodeToString(h.Sum(nil)) == want, nil
}

// dropSetID clears setuid and setgid bits: the layer runs in a sandbox
// with no-new-privileges anyway, and a package's privileged helper has no
// use there.
func dropSetID(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			if m := info.Mode(); m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				return os.Chmod(p, m&^(fs.ModeSetuid|fs.ModeSetgid))
			}
		}
		return nil
	})
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
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

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// runner runs apt and dpkg-deb in their own process group with a minimal
// environment (apt's own configuration still applies: it is the host's).
type runner struct {
	timeout time.Duration
	log     hclog.Logger
	dir     string
}

func (r *runner) run(ctx context.Context, bin string, args []string, onLine func(string)) (string, string, error) {
	return r.runBounded(ctx, bin, args, onLine, 0)
}

// runLimited runs a tool that may write at most max bytes (0: no limit).
func (r *runner) runLimited(ctx context.Context, bin string, args []string, max int64) (string, string, error) {
	return r.runBounded(ctx, bin, args, nil, max)
}

func (r *runner) runBounded(ctx context.Context, bin string, args []string, onLine func(string), max int64) (string, string, error) {
	start := time.Now()
	so, se, err := toolrun.Run(ctx, toolrun.Cmd{Bin: bin, Args: args, Dir: r.dir, Timeout: r.timeout, Keep: 4 << 20, OnLine: onLine, MaxWrite: max,
		Env: []string{"PATH=" + minimalPath, "HOME=" + r.dir, "LANG=C", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}})
	r.log.Info("ran", "tool", filepath.Base(bin), "command", args[0], "ms", time.Since(start).Milliseconds(), "error", err)
	return so, se, err
}
