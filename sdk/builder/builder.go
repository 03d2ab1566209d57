// Package builder is the interface a builder plugin implements: it turns an
// environment spec (a language, a base image, packages the core already
// validated, index settings) into a layer directory beneath its work
// directory: the current directory the core starts it in (WorkDir). No
// request names a location on the machine; what a builder reads besides the
// index (a download cache, local directories of distributions) is its own
// configuration ([plugins.NAME.config]). The core, not the builder, turns that
// directory into an image (copied onto / of the base image, with no network
// and no code run), so a builder never holds the Podman socket and no
// package code runs anywhere. Serve one with plugin.ServeBuilder; protobuf
// never appears in your code.
package builder

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Package is a package of a spec: Version is a constraint ("" for any).
// Extras are optional features ("name[extra]"): a builder installs their
// dependencies too, or refuses the package (host.KindInvalid); it never
// builds the package without them. Plan echoes them in Plan.Packages, and
// the core refuses a plan that drops them.
type Package struct {
	Name    string
	Version string
	Extras  []string
}

// Index says where packages come from.
type Index struct {
	URL       string // "": the language's default index
	ExtraURLs []string
	Offline   bool // only what is cached or vendored
}

// PlanRequest is an environment spec.
type PlanRequest struct {
	Language  string
	BaseImage string
	Packages  []Package
	Index     Index
	// BaseImageID and BaseLabels describe the base image (filled by the
	// core from an inspection): a builder reads the language version and
	// platform from the labels and keys its cache on the ID.
	BaseImageID string
	BaseLabels  map[string]string
}

// Plan is what a build of a spec will produce.
type Plan struct {
	// CacheKey is a hash of every input that determines the result: two
	// specs with the same key must build the same thing.
	CacheKey string
	Packages []Package // what will be installed
	Steps    []string  // the phases Build will report
	Warnings []string
}

// BuildRequest is a build of a spec that Plan accepted.
type BuildRequest struct {
	Spec     PlanRequest
	CacheKey string // Plan's key for Spec
	BuildID  string
	// MaxBytes bounds what the build writes (the layer and whatever its tools
	// unpack, caches included; environment_builder.max_image_size less the
	// base image): past it the builder stops its tools, removes what the
	// build wrote and refuses with host.Errorf(host.KindTooLarge, …) naming
	// the limit. 0: no limit.
	MaxBytes int64
	// Prune bounds the layers and caches the builder keeps between builds.
	Prune Prune
}

// Prune is environment_builder.storage: after each build a builder removes
// layers and cache entries unused for longer than MaxAge, then the least
// recently used until all take at most MaxBytes (never the layer of the
// build in progress). Zero: no such bound.
type Prune struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// Progress is reported while a build runs, Step non-decreasing.
type Progress struct {
	Phase   string
	Step    int // 1-based
	Steps   int
	Message string
}

// Locked is a resolved package: the lock.
type Locked struct {
	Name    string
	Version string
	Hashes  []string // "sha256:<hex>"
}

// BuildResult is what a build produced.
type BuildResult struct {
	CacheKey string
	Lock     []Locked
	// Dir is the layer, relative to the work directory (WorkDir): a tree
	// copied onto / of the base image (for example
	// usr/local/lib/python3.11/dist-packages/...).
	Dir       string
	SizeBytes int64
	Warnings  []string
}

// Builder builds environments. Plan must be pure (no container, no
// network) and deterministic. Build reports progress through progress (from
// one goroutine at a time) and stops when ctx is cancelled.
type Builder interface {
	Plan(ctx context.Context, req PlanRequest) (Plan, error)
	Build(ctx context.Context, req BuildRequest, progress func(Progress)) (BuildResult, error)
}

// Factory builds a builder once the host services are connected.
type Factory func(h host.Host, cfg backend.Config) (Builder, error)

var (
	langRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	// Package names of PyPI (PEP 508), CRAN and conda; nothing an installer
	// would read as an option, a path or a URL.
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	extraRe   = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$`)
	versionRe = regexp.MustCompile(`^(?:[<>=!~]{0,3}[A-Za-z0-9.*+_-]{1,64})(?:,[<>=!~]{0,3}[A-Za-z0-9.*+_-]{1,64}){0,7}$`)
	imageRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:@-]{0,254}$`)
)

// Validate is the defensive check a builder applies to a spec although the
// core validated it: a name that could reach an installer's command line as
// an option, a path, a URL or a second command is refused.
func (r PlanRequest) Validate() error {
	if !langRe.MatchString(r.Language) {
		return fmt.Errorf("language %q is not a language id (lower case letters, digits, - and _)", r.Language)
	}
	if !imageRe.MatchString(r.BaseImage) || strings.Contains(r.BaseImage, "..") {
		return fmt.Errorf("base image %q is not an image reference", r.BaseImage)
	}
	seen := map[string]bool{}
	for i, p := range r.Packages {
		if !nameRe.MatchString(p.Name) {
			return fmt.Errorf("package %d: name %q is not a package name (letters, digits, '.', '_' and '-', starting with a letter or digit)", i+1, p.Name)
		}
		if p.Version != "" && !versionRe.MatchString(p.Version) {
			return fmt.Errorf("package %s: version %q is not a version constraint (e.g. ==1.2.3 or >=1,<2)", p.Name, p.Version)
		}
		if len(p.Extras) > 16 {
			return fmt.Errorf("package %s: %d extras; at most 16", p.Name, len(p.Extras))
		}
		for _, e := range p.Extras {
			if !extraRe.MatchString(e) {
				return fmt.Errorf("package %s: extra %q is not an extra name (letters, digits, '.', '_' and '-')", p.Name, e)
			}
		}
		k := strings.ToLower(p.Name)
		if seen[k] {
			return fmt.Errorf("package %s is listed twice", p.Name)
		}
		seen[k] = true
	}
	for _, u := range append([]string{r.Index.URL}, r.Index.ExtraURLs...) {
		if u == "" {
			continue
		}
		if err := checkIndexURL(u); err != nil {
			return err
		}
	}
	return nil
}

// WorkDir is the directory a builder works in: its process's current
// directory, which the core creates for it (mode 0700), starts it in and
// keeps between builds. Caches and layers live beneath it, and
// BuildResult.Dir is relative to it: the core turns nothing outside it into
// an image. Call it once, in the factory.
func WorkDir() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("the builder's work directory (its current directory): %w", err)
	}
	return d, nil
}

// checkIndexURL admits https anywhere and plain http only to this machine
// (a local index, as the tests serve): credentials or packages sent in clear
// over a network are refused.
func checkIndexURL(u string) error {
	if strings.ContainsAny(u, " \t\r\n") || strings.HasPrefix(u, "-") {
		return fmt.Errorf("index URL %q contains white space or starts with '-'", u)
	}
	pu, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("index URL %q: %w", u, err)
	}
	switch {
	case pu.Scheme == "https" && pu.Host != "":
		return nil
	case pu.Scheme == "http" && (pu.Hostname() == "127.0.0.1" || pu.Hostname() == "localhost" || pu.Hostname() == "::1"):
		return nil
	}
	return fmt.Errorf("index URL %q is not https (plain http is allowed only to 127.0.0.1, localhost or ::1)", u)
}
