// Package imageref decides whether an image reference is on the allowlist.
// Deciding on the raw string is unsafe: "mcp-forge/python:3.11@sha256:…"
// matches the glob "mcp-forge/python:*", yet Podman resolves a digest to any
// local image carrying it, whatever name precedes it. So references are
// parsed with the containers/image reference grammar, normalised the way
// Podman names local images, and compared by name, tag and digest.
package imageref

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"
)

// LocalDomain is where Podman files images that were built or imported
// locally (as MCP-Forge's are): "mcp-forge/python:3.11" is stored as
// "localhost/mcp-forge/python:3.11", and a short name resolves to it first.
const LocalDomain = "localhost"

// Ref is a parsed, normalised image reference.
type Ref struct {
	Name   string // repository with its domain: "localhost/mcp-forge/python"
	Tag    string // "latest" when neither tag nor digest was given; "" with a digest only
	Digest string // "sha256:…" or ""
}

func (r Ref) String() string {
	s := r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// qualify puts short names (first component not a domain) under
// LocalDomain, where Podman looks for them first, instead of docker.io.
func qualify(name string) string {
	i := strings.IndexByte(name, '/')
	if i < 0 || (!strings.ContainsAny(name[:i], ".:") && name[:i] != LocalDomain) {
		return LocalDomain + "/" + name
	}
	return name
}

// qualifyPattern normalises a repository glob as ParseNormalizedNamed
// normalises a name, so that a pattern and a reference compare alike.
func qualifyPattern(name string) string {
	domain, repo, _ := strings.Cut(qualify(name), "/")
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	return domain + "/" + repo
}

func checkText(s string) error {
	if s == "" {
		return errors.New("it is empty")
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("it contains whitespace or a control character at byte %d", i)
	}
	return nil
}

// Parse parses and normalises an image reference.
func Parse(s string) (Ref, error) {
	if err := checkText(s); err != nil {
		return Ref{}, err
	}
	if strings.HasPrefix(s, "sha256:") || reference.IsFullIdentifier(s) {
		return Ref{}, errors.New("it is an image ID, not a name; use the image's name")
	}
	q := qualify(s)
	named, err := reference.ParseNormalizedNamed(q)
	if err != nil {
		return Ref{}, fmt.Errorf("it is not a valid image reference: %w", err)
	}
	r := Ref{Name: named.Name()}
	if t, ok := named.(reference.NamedTagged); ok {
		r.Tag = t.Tag()
	}
	if d, ok := named.(reference.Canonical); ok {
		r.Digest = d.Digest().String()
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// Pattern is one allowlist entry: a repository glob, a tag glob and an
// optional pinned digest. Globs follow path.Match, so "*" never crosses "/".
type Pattern struct {
	raw    string
	name   string // qualified repository glob
	tag    string // "" when only a digest is pinned
	digest string
}

func (p Pattern) String() string { return p.raw }

// ParsePattern parses an allowlist entry such as "mcp-forge/python:*",
// "mcp-forge/custom:*", "quay.io/org/img:1.2" or
// "mcp-forge/python@sha256:<64 hex>" (pins one image by digest).
func ParsePattern(s string) (Pattern, error) {
	if err := checkText(s); err != nil {
		return Pattern{}, err
	}
	p := Pattern{raw: s}
	rest := s
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		d, err := digest.Parse(rest[i+1:])
		if err != nil {
			return Pattern{}, fmt.Errorf("%q after @ is not a digest (sha256:<64 hex digits>): %w", rest[i+1:], err)
		}
		p.digest, rest = d.String(), rest[:i]
	}
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		p.tag, rest = rest[i+1:], rest[:i]
		if p.tag == "" {
			return Pattern{}, errors.New("the tag after ':' is empty; write a tag, or * for any tag")
		}
	}
	if p.tag == "" && p.digest == "" {
		return Pattern{}, fmt.Errorf("it has no tag; write %[1]s:TAG, %[1]s:* for any tag, or %[1]s@sha256:… to pin one image", rest)
	}
	if rest == "" {
		return Pattern{}, errors.New("the repository name is empty")
	}
	p.name = qualifyPattern(rest)
	if _, repo, _ := strings.Cut(p.name, "/"); strings.ToLower(repo) != repo {
		return Pattern{}, errors.New("repository names are lowercase, so this pattern could never match")
	}
	for _, g := range []string{p.name, p.tag} {
		if _, err := path.Match(g, ""); err != nil {
			return Pattern{}, fmt.Errorf("%q is not a valid glob: %w", g, err)
		}
	}
	return p, nil
}

// Match reports whether the pattern admits the reference. A reference with a
// digest is admitted only by a pattern pinning that same digest (Podman
// resolves a digest regardless of the name in front of it); a pattern that
// pins a digest admits only references carrying it.
func (p Pattern) Match(r Ref) bool {
	if ok, _ := path.Match(p.name, r.Name); !ok {
		return false
	}
	if p.digest != r.Digest {
		return false
	}
	if r.Digest != "" && (r.Tag == "" || p.tag == "") {
		return true // the digest alone names the image
	}
	ok, _ := path.Match(p.tag, r.Tag)
	return ok
}

// NotAllowedError says why a reference is refused.
type NotAllowedError struct {
	Image  string
	Reason string
}

func (e *NotAllowedError) Error() string { return fmt.Sprintf("image %q: %s", e.Image, e.Reason) }

// Check parses image and matches it against patterns. It returns the
// normalised reference, or a *NotAllowedError saying why not. Patterns
// that do not parse never match (configuration validation reports them).
func Check(patterns []string, image string) (Ref, error) {
	r, err := Parse(image)
	if err != nil {
		return Ref{}, &NotAllowedError{image, err.Error()}
	}
	for _, s := range patterns {
		if p, err := ParsePattern(s); err == nil && p.Match(r) {
			return r, nil
		}
	}
	if r.Digest != "" {
		return r, &NotAllowedError{image, fmt.Sprintf("a digest selects whichever local image has it, whatever name is written before it, so a digest is allowed only where the allowlist pins it (e.g. %s@%s)", r.Name, r.Digest)}
	}
	why := fmt.Sprintf("%s is not matched by the allowlist", r)
	if !strings.HasPrefix(r.Name, LocalDomain+"/") {
		why += " (a name without a registry, such as mcp-forge/python:3.11, is a local image: localhost/mcp-forge/python:3.11)"
	}
	return r, &NotAllowedError{image, why}
}

// Allowed reports whether image is admitted by patterns.
func Allowed(patterns []string, image string) bool {
	_, err := Check(patterns, image)
	return err == nil
}

// CheckResolved checks that the image Podman resolved r to is the one that
// was approved: for a tag, the image must carry exactly that qualified name
// (a short name could otherwise resolve to another registry's image, or to
// an image ID); for a digest, the image must have that digest and a name in
// the same repository. names are the image's repository tags, digests its
// manifest digests (Podman's RepoTags, Digest and RepoDigests).
func CheckResolved(r Ref, names, digests []string) error {
	if r.Digest == "" {
		want := r.Name + ":" + r.Tag
		if !slices.Contains(names, want) {
			return fmt.Errorf("the engine resolved %s to an image named %v, not %s", r, names, want)
		}
		return nil
	}
	hasDigest := slices.ContainsFunc(digests, func(d string) bool {
		_, after, found := strings.Cut(d, "@")
		if !found {
			after = d
		}
		return after == r.Digest
	})
	if !hasDigest {
		return fmt.Errorf("the engine resolved %s to an image without that digest (digests %v)", r, digests)
	}
	inRepo := slices.ContainsFunc(names, func(n string) bool {
		named, err := reference.ParseNormalizedNamed(n)
		return err == nil && named.Name() == r.Name
	})
	if !inRepo {
		return fmt.Errorf("the engine resolved %s to an image named %v, none in repository %s", r, names, r.Name)
	}
	return nil
}
