package environments

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
)

// Repository is where every custom environment's image is tagged:
// Repository + ":" + name.
const Repository = "mcp-forge/custom"

// Image labels of a custom environment. The instance label is what makes
// an image "built by this forge": list, delete and cleanup touch nothing
// without it.
const (
	labelPrefix         = "io.mcp-forge.env."
	LabelInstance       = labelPrefix + "instance"
	LabelName           = labelPrefix + "name"
	LabelClient         = labelPrefix + "owner"
	LabelLanguage       = labelPrefix + "language"
	LabelDescription    = labelPrefix + "description"
	LabelPackages       = labelPrefix + "packages" // JSON list of the requested specs
	LabelLock           = labelPrefix + "lock"     // JSON list of {name, version, hashes}
	LabelBuilder        = labelPrefix + "builder"
	LabelBuilderVersion = labelPrefix + "builder-version"
	LabelBaseImage      = labelPrefix + "base-image"
	LabelBaseID         = labelPrefix + "base-id"
	LabelCacheKey       = labelPrefix + "cache-key"
	LabelCreated        = labelPrefix + "created"
	LabelBuildID        = labelPrefix + "build-id"
	LabelTemplate       = labelPrefix + "template"
)

// Rule of a refused environment name.
const RuleName = "environment_name"

// nameRe is the environment name rule: letters, digits and hyphens, as a
// Podman tag allows, starting with a letter or digit.
var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,62}$`)

// CheckName refuses a name that is not an environment name.
func CheckName(name string) error {
	if !nameRe.MatchString(name) {
		return refused(RuleName, fmt.Sprintf(
			"environment name %q is not allowed: use 1-63 letters, digits and hyphens, starting with a letter or digit (e.g. \"stats-2024\")", name))
	}
	return nil
}

// Ref is the image reference of an environment name.
func Ref(name string) string { return Repository + ":" + name }

// Locked is one resolved package of an environment.
type Locked struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Hashes  []string `json:"hashes,omitempty"`
}

// Environment is a custom environment as its image's labels describe it.
type Environment struct {
	Name           string            `json:"name"`
	Image          string            `json:"image"`
	ID             string            `json:"id"`
	Language       string            `json:"language"`
	Description    string            `json:"description,omitempty"`
	Template       string            `json:"template,omitempty"`
	Requested      []string          `json:"requested"`
	Packages       []Locked          `json:"packages"`
	Builder        string            `json:"builder"`
	BuilderVersion string            `json:"builder_version"`
	BaseImage      string            `json:"base_image"`
	SizeBytes      int64             `json:"size_bytes"`
	Created        time.Time         `json:"created"`
	LastUsed       time.Time         `json:"last_used"`
	Labels         map[string]string `json:"labels"`
	client         string
	cacheKey       string
}

// labels are the labels of a new environment's image.
func labels(instance, client string, req Request, base baseImage, plan builder.Plan, res builder.BuildResult,
	builderName, builderVersion, buildID string, now time.Time) map[string]string {
	lock := make([]Locked, len(res.Lock))
	for i, l := range res.Lock {
		lock[i] = Locked{Name: l.Name, Version: l.Version, Hashes: l.Hashes}
	}
	pk, lk := jsonText(req.Packages), jsonText(lock)
	l := map[string]string{
		LabelInstance: instance, LabelName: req.Name, LabelClient: client, LabelLanguage: req.Language,
		LabelPackages: pk, LabelLock: lk, LabelBuilder: builderName, LabelBuilderVersion: builderVersion,
		LabelBaseImage: base.ref, LabelBaseID: base.id, LabelCacheKey: plan.CacheKey, LabelCreated: now.UTC().Format(time.RFC3339),
		LabelBuildID: buildID,
	}
	if req.Description != "" {
		l[LabelDescription] = req.Description
	}
	if req.Template != "" {
		l[LabelTemplate] = req.Template
	}
	return l
}

// jsonText is v as JSON without HTML escaping: labels are read by people
// (podman inspect), and "numpy>=1.24" should read as written.
func jsonText(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// fromImage reads an environment back from its image; ok is false for an
// image that is not a tagged environment of instance.
func fromImage(instance string, im runtime.ImageInfo) (Environment, bool) {
	l := im.Labels
	if l[LabelInstance] != instance || !nameRe.MatchString(l[LabelName]) {
		return Environment{}, false
	}
	ref := Ref(l[LabelName])
	tagged := false
	for _, n := range im.Names {
		if n == ref || n == "localhost/"+ref {
			tagged = true
		}
	}
	if !tagged {
		return Environment{}, false
	}
	e := Environment{Name: l[LabelName], Image: ref, ID: im.ID, Language: l[LabelLanguage], Description: l[LabelDescription],
		Template: l[LabelTemplate], Builder: l[LabelBuilder], BuilderVersion: l[LabelBuilderVersion], BaseImage: l[LabelBaseImage],
		SizeBytes: im.Size, Labels: l, client: l[LabelClient], cacheKey: l[LabelCacheKey], Requested: []string{}, Packages: []Locked{}}
	_ = json.Unmarshal([]byte(l[LabelPackages]), &e.Requested)
	_ = json.Unmarshal([]byte(l[LabelLock]), &e.Packages)
	if t, err := time.Parse(time.RFC3339, l[LabelCreated]); err == nil {
		e.Created = t
	} else {
		e.Created = im.Created
	}
	return e, true
}
