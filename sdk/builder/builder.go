// Package builder is the interface a builder plugin implements: it turns an
// environment spec (a language, a base image, packages the core already
// validated, index settings) into a built layer in its workspace, working
// only through the host services (never the Podman socket). Serve one with
// plugin.ServeBuilder; protobuf never appears in your code.
package builder

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Package is a package of a spec: Version is a constraint ("" for any).
type Package struct {
	Name    string
	Version string
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
	Spec        PlanRequest
	CacheKey    string // Plan's key for Spec
	BuildID     string
	WorkspaceID string // host session id whose workspace receives the result
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
	CacheKey  string
	Lock      []Locked
	Dir       string // the produced directory or layer, relative to the workspace
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
		k := strings.ToLower(p.Name)
		if seen[k] {
			return fmt.Errorf("package %s is listed twice", p.Name)
		}
		seen[k] = true
	}
	for _, u := range append([]string{r.Index.URL}, r.Index.ExtraURLs...) {
		if u != "" && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("index URL %q is not https", u)
		}
		if strings.ContainsAny(u, " \t\r\n") {
			return fmt.Errorf("index URL %q contains white space", u)
		}
	}
	return nil
}
