// Package environments builds, lists, deletes and cleans up custom
// environments: images mcp-forge/custom:<name> made of a base image and one
// layer that a builder plugin produced. The policy is here, for every
// builder: package specs, lists and approval (core/packages), rate and
// concurrency limits, build timeout, image size, names, the security scan
// and the audit. The builder only resolves and fetches; the runtime layers
// what it fetched with no network and no command run.
package environments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/packages"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Rules of refusals made here (the package rules are core/packages').
const (
	RuleDisabled  = "environment_builder_disabled"
	RuleBuilder   = "environment_builder"
	RuleLanguage  = "environment_language"
	RuleBaseImage = "environment_base_image"
	RuleTemplate  = "environment_template"
	RuleOwner     = "environment_owner"
	RuleNotFound  = "environment_not_found"
	RuleTimeout   = "max_build_time"
	RuleCancelled = "build_cancelled"
	RuleBuild     = "build_failed"
	// RuleUnsolicited: an approval answer that answers no question the
	// server asked (sent on a first call, or with a made-up, replayed or
	// another connection's request state) is ignored and audited.
	RuleUnsolicited = "approval_unsolicited"
	RuleInUse       = "environment_in_use"
)

// Audit events besides build.request and build.complete. Details name the
// environment "env_name": the audit log replaces any "environment" key by
// a count (it holds environment variables elsewhere).
const (
	EventDelete  = "environment.delete"
	EventCleanup = "environment.cleanup"
	// EventApproved records packages the user approved through elicitation.
	EventApproved = "build.approved"
	// EventRefused is a request refused by a rule the caller can satisfy
	// (a name, a limit); the engine's event of the same name.
	EventRefused = "request.refused"
	// EventViolation is a refusal by a security rule (packages, the layer,
	// ownership, the scan); counted by rule in the metrics.
	EventViolation = audit.SecurityViolation
)

// securityRules are the rules whose refusals are security violations.
var securityRules = map[string]bool{
	packages.RuleSpec: true, packages.RuleBlocklist: true, packages.RuleAllowlist: true, packages.RuleApproval: true,
	RuleLayer: true, RuleOwner: true, RuleScan: true, RuleBaseImage: true, RuleUnsolicited: true,
}

// refusalEvent is the audit event and severity of a refusal by rule.
func refusalEvent(rule string) (string, string) {
	if securityRules[rule] {
		return EventViolation, audit.Warning
	}
	return EventRefused, audit.Warning
}

// refused is a build or request refused by rule, which the caller can fix
// (or an operator can, as detail says): its message says the rule once,
// its audit text is detail alone (the audit line names the rule).
func refused(rule, detail string) *refusal.Error {
	return &refusal.Error{Rule: rule, Msg: "refused (" + rule + "): " + detail, Audit: detail}
}

// Images is what the service needs of the container engine.
type Images interface {
	runtime.ImageBuilder
	runtime.Images
}

// Containers lists containers by label (the runtime's List): the ones of
// this forge that use an environment hold its image.
type Containers interface {
	List(ctx context.Context, labels map[string]string) ([]runtime.Container, error)
}

// Builders hands out builder plugins by name (core/plugins.Manager).
type Builders interface {
	Builder(ctx context.Context, name string) (builder.Builder, error)
}

// Options configure a Service.
type Options struct {
	Config   config.EnvironmentBuilder
	Instance string // the forge instance id: labels images as this forge's
	StateDir string // builder work directories live in StateDir/builds/<builder>
	Images   Images
	// Containers, when set, lets Delete wait for the containers of runs in
	// the environment to be removed before it removes the image.
	Containers Containers
	Builders   Builders
	// BuilderVersion reports a loaded builder plugin's version, for labels.
	BuilderVersion func(name string) string
	// DefaultBase is the base image per language when a request names none.
	DefaultBase map[string]string
	// CheckImage is the container policy's image check (images.allowed).
	CheckImage func(string) error
	Scanner    Scanner // nil: Trivy{}
	Audit      audit.Recorder
	Log        hclog.Logger
	Now        func() time.Time
}

// Service builds and manages environments. It is safe for concurrent use.
type Service struct {
	o       Options
	policy  *packages.Policy
	limiter *packages.Limiter
	maxSize int64
	prune   builder.Prune // environment_builder.storage, for the builders
	usage   *usage

	mu    sync.Mutex
	names map[string]chan struct{} // one build per environment name at a time
}

// New builds the service from the configuration.
func New(o Options) (*Service, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.Scanner == nil {
		o.Scanner = Trivy{}
	}
	pol, err := packages.New(o.Config)
	if err != nil {
		return nil, err
	}
	lim, err := packages.NewLimiter(o.Config, o.Now)
	if err != nil {
		return nil, err
	}
	max := int64(o.Config.MaxImageSize)
	// Storage.MaxSize 0 is no bound, as Prune.MaxBytes 0 is.
	prune := builder.Prune{MaxAge: time.Duration(o.Config.Storage.MaxAgeDays) * 24 * time.Hour, MaxBytes: int64(o.Config.Storage.MaxSize)}
	if err := os.MkdirAll(filepath.Join(o.StateDir, "builds"), 0o700); err != nil {
		return nil, fmt.Errorf("builds directory: %w", err)
	}
	return &Service{o: o, policy: pol, limiter: lim, maxSize: max, prune: prune, names: map[string]chan struct{}{},
		usage: loadUsage(filepath.Join(o.StateDir, "builds", "last-used.json"))}, nil
}

// BuilderName is the configured builder plugin.
func (s *Service) BuilderName() string { return s.o.Config.Builder }

// Templates are the configured templates.
func (s *Service) Templates() map[string]config.Template { return s.o.Config.Templates }

// ApprovalNeeded is returned instead of building when packages match an
// approval pattern and the request says the user can be asked: the caller
// asks (MCP elicitation) and repeats the request with the answer.
type ApprovalNeeded struct {
	Packages []string // canonical specs
	Why      []string // the rule's explanation of each
}

func (a *ApprovalNeeded) Error() string {
	return "the user must approve " + strings.Join(a.Packages, ", ")
}

// Request is a build request.
type Request struct {
	Name        string
	Language    string // python (default) or r
	BaseImage   string // "": the language's default image
	Template    string
	Packages    []string
	Description string
	Client      string
	// CanAsk: the user can be asked to approve packages that match an
	// approval pattern (the client supports elicitation); a build needing
	// approval then returns *ApprovalNeeded. UserApproved and UserDeclined
	// are the user's answer, in the repeated request.
	CanAsk, UserApproved, UserDeclined bool
	// IgnoredAnswer says why an approval answer the request carried was
	// not taken (it answered no question the server asked in this call):
	// Build audits it (RuleUnsolicited) and treats the request as
	// unanswered, whatever UserApproved says.
	IgnoredAnswer string
	Progress      func(builder.Progress)
}

// Result is a finished (or reused) build.
type Result struct {
	Image          string   `json:"image"`
	Packages       []Locked `json:"packages"`
	SizeBytes      int64    `json:"size_bytes"`
	BuildSeconds   float64  `json:"build_time"`
	CacheHit       bool     `json:"cache_hit"`
	Builder        string   `json:"builder"`
	BuilderVersion string   `json:"builder_version,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
	Scan           string   `json:"scan"`
}

type baseImage struct{ ref, id string }

// refuse audits a refusal and returns it.
func (s *Service) refuse(client, name string, r *refusal.Error, extra map[string]any) error {
	d := map[string]any{"rule": r.Rule, "env_name": name}
	for k, v := range extra {
		d[k] = v
	}
	ev, sev := refusalEvent(r.Rule)
	s.o.Audit.Record(audit.Entry{Event: ev, Severity: sev, UserID: client, Details: d, Error: r.AuditText()})
	return r
}

// refusePackages audits every package refusal inside err under its rule.
func (s *Service) refusePackages(client, name string, err error) error {
	rs := packages.Refusals(err)
	for _, r := range rs {
		d := map[string]any{"rule": r.Rule, "env_name": name}
		maps.Copy(d, r.Details)
		ev, sev := refusalEvent(r.Rule)
		s.o.Audit.Record(audit.Entry{Event: ev, Severity: sev, UserID: client, Details: d, Error: r.AuditText()})
	}
	rule := packages.RuleSpec
	if len(rs) > 0 {
		rule = rs[0].Rule
	}
	// The tool result says "refused (<rule>): " once; the packages error
	// would say it again for every package refused by the same rule.
	detail := err.Error()
	for _, r := range rs {
		if r.Rule == rule {
			detail = strings.Replace(detail, r.Error(), r.AuditText(), 1)
		}
	}
	return refused(rule, detail)
}

// expand joins a template's packages with the request's: a package the
// request names replaces the template's entry for it (same PEP 503 name).
func expand(lang packages.Language, tmpl, extra []string) []string {
	key := func(s string) string {
		if sp, err := packages.ParseSpec(lang, s); err == nil {
			return sp.Key
		}
		return s
	}
	over := map[string]bool{}
	for _, p := range extra {
		over[key(p)] = true
	}
	var out []string
	for _, p := range tmpl {
		if !over[key(p)] {
			out = append(out, p)
		}
	}
	return append(out, extra...)
}

// Build validates, builds (or reuses) and tags an environment.
func (s *Service) Build(ctx context.Context, req Request) (Result, error) {
	cfg := s.o.Config
	if req.IgnoredAnswer != "" {
		// Fail closed: an answer to no question approves nothing. Audited
		// first, whatever else the request breaks.
		req.UserApproved, req.UserDeclined = false, false
		ev, sev := refusalEvent(RuleUnsolicited)
		s.o.Audit.Record(audit.Entry{Event: ev, Severity: sev, UserID: req.Client,
			Details: map[string]any{"rule": RuleUnsolicited, "env_name": req.Name}, Error: "an approval answer was ignored: " + req.IgnoredAnswer})
	}
	if !cfg.Enabled {
		return Result{}, s.refuse(req.Client, req.Name, refused(RuleDisabled, "custom environments are disabled (environment_builder.enabled = false)"), nil)
	}
	if err := CheckName(req.Name); err != nil {
		return Result{}, s.refuse(req.Client, req.Name, err.(*refusal.Error), nil)
	}
	if req.Language == "" {
		req.Language = "python"
	}
	lang := packages.Language(req.Language)
	if lang != packages.Python && lang != packages.R {
		return Result{}, s.refuse(req.Client, req.Name, refused(RuleLanguage, fmt.Sprintf("language %q is not one environments are built for; use \"python\" or \"r\"", req.Language)), nil)
	}
	if req.Template != "" {
		t, ok := cfg.Templates[req.Template]
		if !ok {
			return Result{}, s.refuse(req.Client, req.Name, refused(RuleTemplate, fmt.Sprintf(
				"no template named %q (configured: %s); read mcp://forge/environments/list for the templates", req.Template, strings.Join(s.templateNames(), ", "))), nil)
		}
		req.Packages = expand(lang, t.Packages, req.Packages)
	}
	if req.BaseImage == "" {
		req.BaseImage = s.o.DefaultBase[req.Language]
		if req.BaseImage == "" {
			return Result{}, s.refuse(req.Client, req.Name, refused(RuleBaseImage, fmt.Sprintf("no default base image for %s (no backend of it is loaded); name base_image", req.Language)), nil)
		}
	}
	if s.o.CheckImage != nil {
		if err := s.o.CheckImage(req.BaseImage); err != nil {
			return Result{}, s.refuse(req.Client, req.Name, refused(RuleBaseImage, fmt.Sprintf("base image %q is not allowed: %v", req.BaseImage, err)), nil)
		}
	}
	// Building on an environment is using it: only its client may.
	if err := s.checkOwner(ctx, req.Client, req.BaseImage, "base_image"); err != nil {
		return Result{}, err
	}

	// Packages: specs, lists, approval — before any limit is spent and
	// before the builder hears of the request.
	res, err := s.policy.Check(req.Packages, lang)
	if err != nil {
		return Result{}, s.refusePackages(req.Client, req.Name, err)
	}
	var needs, why []string
	var blocked []error
	for _, d := range res.Decisions {
		switch d.Verdict {
		case packages.Blocked:
			blocked = append(blocked, d.Err())
		case packages.NeedsApproval:
			needs, why = append(needs, d.Spec.String()), append(why, d.Detail)
		}
	}
	if len(blocked) > 0 {
		return Result{}, s.refusePackages(req.Client, req.Name, errors.Join(blocked...))
	}
	if len(needs) > 0 {
		switch {
		case req.UserApproved:
			s.o.Audit.Record(audit.Entry{Event: EventApproved, Severity: audit.Info, UserID: req.Client, Success: true,
				Details: map[string]any{"env_name": req.Name, "approved_by_user": needs}})
		case req.UserDeclined:
			return Result{}, s.refuse(req.Client, req.Name, refused(packages.RuleApproval, fmt.Sprintf(
				"the user did not approve %s; nothing was built", strings.Join(needs, ", "))), map[string]any{"packages": needs})
		case req.CanAsk:
			return Result{}, &ApprovalNeeded{Packages: needs, Why: why}
		default:
			var errs []error
			for _, d := range res.Decisions {
				if d.Verdict == packages.NeedsApproval {
					errs = append(errs, d.Err())
				}
			}
			note := "this client cannot be asked: it does not support MCP elicitation"
			if req.IgnoredAnswer != "" {
				note += "; the approval answer the call carried was ignored: " + req.IgnoredAnswer
			}
			return Result{}, s.refusePackages(req.Client, req.Name, fmt.Errorf("%w (%s)", errors.Join(errs...), note))
		}
	}
	specs := res.Specs()
	canon := make([]string, len(specs))
	pkgs := make([]builder.Package, len(specs))
	for i, sp := range specs {
		canon[i] = sp.String()
		var cs []string
		for _, c := range sp.Constraints {
			cs = append(cs, c.Op+c.Version)
		}
		// Extras go to the builder, which installs them or refuses: a
		// package is never built without the extras asked for.
		pkgs[i] = builder.Package{Name: sp.Name, Version: strings.Join(cs, ","), Extras: sp.Extras}
	}
	req.Packages = canon

	// One build per name at a time: a second one waits, then likely hits the cache.
	unlock, err := s.lockName(ctx, req.Name)
	if err != nil {
		return Result{}, s.refuse(req.Client, req.Name, refused(RuleCancelled, "the build was cancelled while it waited for another build of the same name; nothing was built"), nil)
	}
	defer unlock()
	if im, ok, err := s.o.Images.Image(ctx, Ref(req.Name)); err != nil {
		return Result{}, err
	} else if e, ours := fromImage(s.o.Instance, im); ok && (!ours || e.client != req.Client) {
		return Result{}, s.refuse(req.Client, req.Name, refused(RuleOwner, fmt.Sprintf(
			"the name %s is taken (by another user, or by an image this server did not build); choose another name", Ref(req.Name))), nil)
	}

	release, err := s.limiter.Acquire(req.Client)
	if err != nil {
		var le *packages.LimitError
		if errors.As(err, &le) {
			return Result{}, s.refuse(req.Client, req.Name, refused(le.Refusal.Rule, le.Refusal.AuditText()), nil)
		}
		return Result{}, err
	}
	defer release()

	start := s.o.Now()
	s.o.Audit.Record(audit.Entry{Event: audit.BuildRequest, Severity: audit.Info, UserID: req.Client, Success: true, Details: map[string]any{
		"env_name": req.Name, "language": req.Language, "base_image": req.BaseImage, "packages": canon, "template": req.Template,
		"builder": cfg.Builder, "index": redactURL(cfg.IndexURL)}})
	out, err := s.build(ctx, req, pkgs, start)
	d := map[string]any{"env_name": req.Name, "builder": cfg.Builder, "duration_ms": s.o.Now().Sub(start).Milliseconds(), "cache_hit": out.CacheHit}
	e := audit.Entry{Event: audit.BuildComplete, Severity: audit.Info, UserID: req.Client, Success: err == nil, Details: d}
	if err != nil {
		e.Severity, e.Error = audit.Warning, err.Error()
		var r *refusal.Error
		if errors.As(err, &r) {
			d["rule"] = r.Rule
		}
	} else {
		d["image"], d["size_bytes"], d["packages"] = out.Image, out.SizeBytes, len(out.Packages)
		s.usage.touch(out.Image, s.o.Now())
	}
	s.o.Audit.Record(e)
	return out, err
}

func (s *Service) build(ctx context.Context, req Request, pkgs []builder.Package, start time.Time) (Result, error) {
	cfg := s.o.Config
	out := Result{Builder: cfg.Builder, Scan: "not scanned"}
	if s.o.BuilderVersion != nil {
		out.BuilderVersion = s.o.BuilderVersion(cfg.Builder)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.MaxBuildTime)*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	fail := func(err error) (Result, error) {
		switch {
		// The plugin's stream may report the cut before this context's
		// timer has fired: the clock decides, not the order of errors.
		case errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline):
			return out, refused(RuleTimeout, fmt.Sprintf("the build took longer than environment_builder.max_build_time (%d s) and was stopped; request fewer packages or an operator raises the limit", cfg.MaxBuildTime))
		case ctx.Err() != nil:
			return out, refused(RuleCancelled, "the build was cancelled; nothing was kept")
		}
		return out, err
	}

	b, err := s.o.Builders.Builder(ctx, cfg.Builder)
	if err != nil {
		return out, refused(RuleBuilder, fmt.Sprintf("the builder plugin %q (environment_builder.builder) is not available: %v; an operator installs mcp-forge-plugin-%s or chooses another builder", cfg.Builder, err, cfg.Builder))
	}
	bi, ok, err := s.o.Images.Image(ctx, req.BaseImage)
	if err != nil {
		return fail(fmt.Errorf("inspect base image %s: %w", req.BaseImage, err))
	}
	if !ok {
		return out, refused(RuleBaseImage, fmt.Sprintf("base image %q does not exist on this host (build the sandbox images with `make images`)", req.BaseImage))
	}
	base := baseImage{ref: req.BaseImage, id: bi.ID}
	pr := builder.PlanRequest{Language: req.Language, BaseImage: req.BaseImage, Packages: pkgs, BaseImageID: bi.ID, BaseLabels: bi.Labels,
		Index: builder.Index{URL: cfg.IndexURL, ExtraURLs: cfg.ExtraIndexURLs, Offline: cfg.Offline}}
	if err := pr.Validate(); err != nil {
		return out, refused(packages.RuleSpec, err.Error())
	}
	progress := func(p builder.Progress) {
		if req.Progress != nil {
			req.Progress(p)
		}
	}
	plan, err := b.Plan(ctx, pr)
	if err != nil {
		return fail(refused(RuleBuild, fmt.Sprintf("the %s builder could not plan the environment: %v", cfg.Builder, err)))
	}
	out.Warnings = append(out.Warnings, plan.Warnings...)
	if err := extrasPlanned(pkgs, plan.Packages); err != nil {
		return out, refused(packages.RuleSpec, fmt.Sprintf("the %s builder %v; nothing was built (request the extra's packages by name instead, or an operator configures a builder that supports extras)", cfg.Builder, err))
	}
	if plan.CacheKey == "" {
		return out, refused(RuleBuild, fmt.Sprintf("the %s builder gave no cache key; the builder plugin is faulty", cfg.Builder))
	}

	// Cache hit: this name already holds an image of the same key, base and builder.
	if e, ok, err := s.get(ctx, req.Name); err != nil {
		return fail(err)
	} else if ok && e.cacheKey == plan.CacheKey && e.Labels[LabelBaseID] == bi.ID && e.Builder == cfg.Builder {
		out.Image, out.Packages, out.SizeBytes, out.CacheHit = e.Image, e.Packages, e.SizeBytes, true
		out.BuildSeconds = s.o.Now().Sub(start).Seconds()
		out.Scan = "scanned when built"
		return out, nil
	}

	// The builder runs in this directory (the plugin manager made it 0700
	// and started the plugin there, see WorkDir); the layer is resolved
	// beneath it whatever the builder says.
	work := WorkDir(s.o.StateDir, cfg.Builder)
	buildID := newID()
	steps := len(plan.Steps) + 2 // the builder's, then layer and check
	// The layer may take what max_image_size leaves beside the base image;
	// the builder stops its tools there (a small archive can unpack to
	// gigabytes) and removes what it wrote.
	budget := s.maxSize - bi.Size
	if budget <= 0 {
		return out, refused(RuleImageSize, fmt.Sprintf("the base image %s alone takes %d bytes, environment_builder.max_image_size (%s) leaves nothing for packages; an operator raises the limit", req.BaseImage, bi.Size, cfg.MaxImageSize))
	}
	br, err := b.Build(ctx, builder.BuildRequest{Spec: pr, CacheKey: plan.CacheKey, BuildID: buildID,
		MaxBytes: budget, Prune: s.prune}, func(p builder.Progress) {
		p.Steps = steps
		progress(p)
	})
	var he *host.Error
	switch {
	case err != nil && errors.As(err, &he) && he.Kind == host.KindTooLarge && ctx.Err() == nil:
		return out, refused(RuleImageSize, fmt.Sprintf(
			"the packages take more than environment_builder.max_image_size (%s, %d bytes beside the base image) and the build was stopped there; nothing of it was kept: %v; request fewer or smaller packages, or an operator raises the limit",
			cfg.MaxImageSize, budget, err))
	case err != nil:
		return fail(refused(RuleBuild, fmt.Sprintf("the %s builder failed: %v", cfg.Builder, err)))
	}
	out.Warnings = append(out.Warnings, br.Warnings...)
	names := make([]string, len(br.Lock))
	for i, l := range br.Lock {
		names[i] = l.Name
		out.Packages = append(out.Packages, Locked{Name: l.Name, Version: l.Version, Hashes: l.Hashes})
	}
	// The blocklist judges everything that lands in the image, dependencies too.
	if err := s.policy.CheckLocked(names, packages.Language(req.Language)); err != nil {
		return out, s.refusePackages(req.Client, req.Name, err)
	}
	layer, err := resolveLayer(work, br.Dir)
	if err != nil {
		return out, err
	}
	if _, err := checkLayer(layer, s.maxSize); err != nil {
		return out, err
	}
	progress(builder.Progress{Phase: "layer", Step: steps - 1, Steps: steps, Message: "layering onto " + req.BaseImage})
	lbls := labels(s.o.Instance, req.Client, req, base, plan, br, cfg.Builder, out.BuilderVersion, buildID, s.o.Now())
	id, err := s.o.Images.BuildLayer(ctx, runtime.LayerBuild{Base: bi.ID, Context: layer, Labels: lbls})
	if err != nil {
		s.removeBuild(buildID)
		return fail(fmt.Errorf("layering the environment: %w", err))
	}
	// From here on the untagged image is removed unless it is tagged.
	tagged := false
	defer func() {
		if !tagged {
			s.removeImage(id)
		}
	}()
	progress(builder.Progress{Phase: "check", Step: steps, Steps: steps, Message: "checking size and scanning"})
	im, ok, err := s.o.Images.Image(ctx, id)
	if err != nil || !ok {
		return fail(fmt.Errorf("inspect the built image: %v", err))
	}
	if im.Size > s.maxSize {
		return out, refused(RuleImageSize, fmt.Sprintf(
			"the image would be %d bytes (base image included), more than environment_builder.max_image_size (%s); it was removed; request fewer or smaller packages, or an operator raises the limit",
			im.Size, cfg.MaxImageSize))
	}
	out.SizeBytes = im.Size
	if out.Scan, err = s.scan(ctx, id); err != nil {
		return fail(err)
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	prev, hadPrev, _ := s.get(ctx, req.Name)
	if err := s.o.Images.Tag(ctx, id, Ref(req.Name)); err != nil {
		return fail(fmt.Errorf("tag %s: %w", Ref(req.Name), err))
	}
	tagged = true
	if hadPrev && prev.ID != id {
		// The name moved to the new image; the old one is no environment any more.
		s.removeImage(prev.ID)
	}
	out.Image = Ref(req.Name)
	out.BuildSeconds = s.o.Now().Sub(start).Seconds()
	return out, nil
}

// extrasPlanned refuses a plan that dropped an extra asked for: a builder
// of an older SDK knows nothing of extras and would build the package
// without them.
func extrasPlanned(want, planned []builder.Package) error {
	got := map[string][]string{}
	for _, p := range planned {
		got[packages.NormalizeName(p.Name)] = p.Extras
	}
	for _, p := range want {
		for _, e := range p.Extras {
			if !slices.Contains(got[packages.NormalizeName(p.Name)], e) {
				return fmt.Errorf("does not install the extra [%s] of %s", e, p.Name)
			}
		}
	}
	return nil
}

// scan runs the security scan per configuration.
func (s *Service) scan(ctx context.Context, id string) (string, error) {
	mode := s.o.Config.SecurityScan
	if mode == "off" {
		return "not scanned: environment_builder.security_scan is off", nil
	}
	if _, ok := s.o.Scanner.Available(); !ok {
		if mode == "required" {
			return "", refused(RuleScan, "environment_builder.security_scan is \"required\" but trivy is not on PATH; an operator installs trivy or sets it to \"auto\"")
		}
		return "not scanned: trivy is not on PATH", nil
	}
	fs, err := s.o.Scanner.Scan(ctx, id)
	if err != nil {
		return "", refused(RuleScan, fmt.Sprintf("the security scan failed, so the image was removed: %v", err))
	}
	if bad := Failing(fs, s.o.Config.ScanFailOn); len(bad) > 0 {
		var parts []string
		for i, f := range bad {
			if i == 5 {
				parts = append(parts, fmt.Sprintf("and %d more", len(bad)-5))
				break
			}
			parts = append(parts, fmt.Sprintf("%s %s in %s %s", f.Severity, f.ID, f.Package, f.Installed))
		}
		return "", refused(RuleScan, fmt.Sprintf("trivy found %s (environment_builder.scan_fail_on = %s); the image was removed; pin versions without these findings",
			strings.Join(parts, "; "), strings.Join(s.o.Config.ScanFailOn, ",")))
	}
	return fmt.Sprintf("scanned by trivy: %d findings, none of %s", len(fs), strings.Join(s.o.Config.ScanFailOn, ",")), nil
}

func (s *Service) removeImage(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.o.Images.RemoveImage(ctx, id); err != nil {
		s.o.Log.Warn("could not remove a refused environment image", "image", id, "error", err)
	}
}

// removeBuild removes whatever image a build left behind when its request
// was cut off (the engine may finish a build the client stopped waiting for).
func (s *Service) removeBuild(buildID string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ims, err := s.o.Images.Images(ctx, map[string]string{LabelInstance: s.o.Instance, LabelBuildID: buildID})
	if err != nil {
		return
	}
	for _, im := range ims {
		s.removeImage(im.ID)
	}
}

func (s *Service) lockName(ctx context.Context, name string) (unlock func(), err error) {
	s.mu.Lock()
	m := s.names[name]
	if m == nil {
		m = make(chan struct{}, 1)
		s.names[name] = m
	}
	s.mu.Unlock()
	// A waiter gives up with its context: a cancelled build (an MCP task's,
	// a client gone) does not wait out another one's whole build.
	select {
	case m <- struct{}{}:
		return func() { <-m }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// get finds the environment of a name, if this forge built it.
func (s *Service) get(ctx context.Context, name string) (Environment, bool, error) {
	im, ok, err := s.o.Images.Image(ctx, Ref(name))
	if err != nil || !ok {
		return Environment{}, false, err
	}
	e, ok := fromImage(s.o.Instance, im)
	if ok {
		e.LastUsed = s.usage.get(e.Image, e.Created)
	}
	return e, ok, nil
}

// all lists every environment of this forge, every client.
func (s *Service) all(ctx context.Context) ([]Environment, error) {
	ims, err := s.o.Images.Images(ctx, map[string]string{LabelInstance: s.o.Instance})
	if err != nil {
		return nil, err
	}
	var out []Environment
	for _, im := range ims {
		if e, ok := fromImage(s.o.Instance, im); ok {
			e.LastUsed = s.usage.get(e.Image, e.Created)
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// List is the environments of client.
func (s *Service) List(ctx context.Context, client string) ([]Environment, error) {
	all, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	out := []Environment{}
	for _, e := range all {
		if e.client == client {
			out = append(out, e)
		}
	}
	return out, nil
}

// Delete removes an environment client built.
func (s *Service) Delete(ctx context.Context, client, name string) error {
	if err := CheckName(name); err != nil {
		return s.refuse(client, name, err.(*refusal.Error), nil)
	}
	unlock, err := s.lockName(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	e, ok, err := s.get(ctx, name)
	if err != nil {
		return err
	}
	if !ok || e.client != client {
		// Someone else's and not ours look the same: a name tells nothing of another user.
		return s.refuse(client, name, refused(RuleNotFound, fmt.Sprintf(
			"no environment %q built by this server for you; list_environments shows yours", name)), nil)
	}
	if err := s.waitUnused(ctx, client, name, e); err != nil {
		return err
	}
	err = s.o.Images.RemoveImage(ctx, e.ID)
	s.o.Audit.Record(audit.Entry{Event: EventDelete, Severity: severity(err), UserID: client, Success: err == nil,
		Details: map[string]any{"env_name": name, "image": e.Image, "id": e.ID}, Error: errString(err)})
	if err == nil {
		s.usage.forget(e.Image)
	}
	return err
}

// deleteWait bounds how long Delete waits for the containers of runs in an
// environment to go: a run's container is removed in the background after
// its answer (a second or so), a run still going may take its timeout.
var deleteWait = 15 * time.Second

// waitUnused waits until no container of this forge uses the environment's
// image, so that removing it does not fail with "image is in use by a
// container". Only this forge's containers are looked at (by label), and
// none is removed here: a run's container goes with its run, and a
// session's with its session, which the caller must destroy (refused with
// RuleInUse, as is a run that does not end within deleteWait).
func (s *Service) waitUnused(ctx context.Context, client, name string, e Environment) error {
	if s.o.Containers == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, deleteWait)
	defer cancel()
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		list, err := s.o.Containers.List(ctx, map[string]string{runtime.LabelManaged: "true", runtime.LabelInstance: s.o.Instance})
		if err != nil {
			if ctx.Err() == nil {
				return fmt.Errorf("delete environment %q: list the containers that may use it: %w", name, err)
			}
			list = nil // the wait is over: what follows says so
		}
		runs, sessions := 0, 0
		for _, c := range list {
			if c.ImageID != e.ID {
				continue
			}
			if c.Labels[runtime.LabelOneShot] == "true" {
				runs++
			} else {
				sessions++
			}
		}
		switch {
		case sessions > 0:
			return s.refuse(client, name, refused(RuleInUse, fmt.Sprintf(
				"environment %q is in use by %d session(s) started with custom_image %s: destroy them (destroy_session), then delete it", name, sessions, e.Image)), nil)
		case runs == 0 && err == nil:
			return nil
		}
		select {
		case <-ctx.Done():
			if parent := context.Cause(ctx); errors.Is(parent, context.Canceled) {
				return parent
			}
			return s.refuse(client, name, refused(RuleInUse, fmt.Sprintf(
				"environment %q is in use by %d run(s) still going after %s: delete it again once they have ended", name, runs, deleteWait)), nil)
		case <-time.After(pause):
		}
	}
}

func severity(err error) string {
	if err != nil {
		return audit.Error
	}
	return audit.Info
}

// CheckUse refuses running in an environment of another client (custom_image
// of an execute); see checkOwner.
func (s *Service) CheckUse(ctx context.Context, client, image string) error {
	return s.checkOwner(ctx, client, image, "custom_image")
}

// checkOwner is the one ownership check of every place a request names an
// image (custom_image, base_image): the reference is resolved by the engine
// and judged by the image's labels, not by its spelling, so a tag, the
// "localhost/" form, an image ID or another tag of the same image all meet
// the same check. An image this forge built for another client is refused;
// an image that is no environment of this forge is left to the image
// policy. An engine that cannot say refuses (fails closed).
func (s *Service) checkOwner(ctx context.Context, client, image, field string) error {
	im, found, err := s.o.Images.Image(ctx, image)
	if err != nil {
		return fmt.Errorf("%s %q: cannot tell whose image it is: %w", field, image, err)
	}
	if !found || im.Labels[LabelInstance] == "" {
		return nil // no environment: the image policy judges it
	}
	name := im.Labels[LabelName]
	if im.Labels[LabelInstance] != s.o.Instance {
		// Built by another MCP-Forge on this host (or this one on another
		// base path): its client is a tenant this server cannot vouch for,
		// so nobody here may run in it or build on it.
		return s.refuse(client, name, refused(RuleOwner, fmt.Sprintf(
			"%s %q is an environment another MCP-Forge server built; build your own with build_environment", field, image)),
			map[string]any{"field": field, "image": image, "instance": im.Labels[LabelInstance]})
	}
	if im.Labels[LabelClient] != client {
		return s.refuse(client, name, refused(RuleOwner, fmt.Sprintf(
			"%s %q is an environment of another user; build your own with build_environment", field, image)),
			map[string]any{"field": field, "image": image})
	}
	if e, ok := fromImage(s.o.Instance, im); ok {
		s.usage.touch(e.Image, s.o.Now())
	}
	return nil
}

func (s *Service) templateNames() []string {
	var out []string
	for n := range s.o.Config.Templates {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redactURL drops credentials from an index URL for logs and the audit.
func redactURL(u string) string {
	if u == "" {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if p.User != nil {
		p.User = url.User("REDACTED")
	}
	p.RawQuery = ""
	return p.String()
}
