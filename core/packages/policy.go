package packages

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Rule names, for errors and the audit log.
const (
	RuleSpec        = "package_spec"
	RuleMaxPackages = "max_packages_per_build"
	RuleDuplicate   = "package_duplicate"
	RuleBlocklist   = "package_blocklist"
	RuleAllowlist   = "package_allowlist"
	RuleApproval    = "package_approval"
	RuleApproved    = "approved_packages"
	RuleNoAllowlist = "allowlist_disabled"
)

// Configuration field paths named in errors, so that an operator knows what
// to change.
const (
	fieldPrefix        = "environment_builder.package_validation."
	FieldAllowlistPath = fieldPrefix + "allowlist_path"
	FieldBlocklistPath = fieldPrefix + "blocklist_path"
	FieldApproval      = fieldPrefix + "require_approval_patterns"
	FieldApproved      = fieldPrefix + "approved_packages"
	FieldUseAllowlist  = fieldPrefix + "use_allowlist"
	FieldMaxPackages   = "environment_builder.max_packages_per_build"
)

// refused is a refused package or build request: its message says the
// package policy refused it by rule, its audit text is detail alone, and
// its audit details name the package (the spec as requested) and the
// pattern that decided (and where it is written), when there are any.
func refused(rule, pkg, pattern, detail string) *refusal.Error {
	r := &refusal.Error{Rule: rule, Msg: fmt.Sprintf("package policy refused (%s): %s", rule, detail), Audit: detail}
	if pkg != "" || pattern != "" {
		r.Details = map[string]any{}
		if pkg != "" {
			r.Details["package"] = pkg
		}
		if pattern != "" {
			r.Details["pattern"] = pattern
		}
	}
	return r
}

// Refusals lists the refusals inside an error Check or Acquire returned.
func Refusals(err error) []*refusal.Error {
	var out []*refusal.Error
	var walk func(error)
	walk = func(e error) {
		var r *refusal.Error
		if multi, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range multi.Unwrap() {
				walk(x)
			}
		} else if errors.As(e, &r) {
			out = append(out, r)
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Verdict is what the policy says about one package.
type Verdict int

const (
	Allowed Verdict = iota
	Blocked
	NeedsApproval
)

func (v Verdict) String() string {
	return [...]string{"allowed", "blocked", "needs approval"}[v]
}

// Decision is the verdict on one requested package and the rule behind it.
type Decision struct {
	Input   string // as requested
	Spec    Spec
	Verdict Verdict
	Rule    string
	Pattern *Pattern // the list entry or approval pattern that decided, if any
	Detail  string
}

// Err is the decision as an error, nil when the package is allowed.
func (d Decision) Err() error {
	if d.Verdict == Allowed {
		return nil
	}
	var pattern string
	if d.Pattern != nil {
		pattern = d.Pattern.String()
	}
	return refused(d.Rule, d.Input, pattern, d.Detail)
}

// Result holds one decision per requested package, in request order.
type Result struct {
	Decisions []Decision
}

// Allowed reports whether every package may be installed.
func (r Result) Allowed() bool {
	for _, d := range r.Decisions {
		if d.Verdict != Allowed {
			return false
		}
	}
	return true
}

// Err joins the refusals of every package that is not allowed.
func (r Result) Err() error {
	var errs []error
	for _, d := range r.Decisions {
		if err := d.Err(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Specs are the canonical specs, for the builder, when all are allowed.
func (r Result) Specs() []Spec {
	out := make([]Spec, len(r.Decisions))
	for i, d := range r.Decisions {
		out[i] = d.Spec
	}
	return out
}

// Policy decides which packages a build may install. It is immutable once
// built, so concurrent Checks need no lock.
type Policy struct {
	useAllowlist bool
	maxPackages  int
	allow, block *List
	approval     []Pattern
	approved     map[Language]map[string]bool // normalised names; "" = any language
}

// New builds the policy from the environment_builder configuration, reading
// the list files it names. Every problem is an error naming its field.
func New(cfg config.EnvironmentBuilder) (*Policy, error) {
	pv := cfg.PackageValidation
	if cfg.MaxPackagesPerBuild <= 0 {
		return nil, fmt.Errorf("%s: must be > 0 (got %d)", FieldMaxPackages, cfg.MaxPackagesPerBuild)
	}
	p := &Policy{useAllowlist: pv.UseAllowlist, maxPackages: cfg.MaxPackagesPerBuild,
		approved: map[Language]map[string]bool{}}
	var err error
	if p.block, err = LoadList("blocklist", pv.BlocklistPath); err != nil {
		return nil, fmt.Errorf("%s: %w", FieldBlocklistPath, err)
	}
	// The allowlist is read even when unused so that a broken file is found
	// before someone switches it on.
	if p.allow, err = LoadList("allowlist", pv.AllowlistPath); err != nil {
		return nil, fmt.Errorf("%s: %w", FieldAllowlistPath, err)
	}
	for i, text := range pv.RequireApprovalPatterns {
		pat, err := ParsePattern(text, fmt.Sprintf("%s[%d]", FieldApproval, i))
		if err != nil {
			return nil, err
		}
		p.approval = append(p.approval, pat)
	}
	for i, text := range pv.ApprovedPackages {
		lang, name := Language(""), text
		if l, rest, ok := strings.Cut(text, ":"); ok {
			lang, name = Language(l), rest
		}
		parseAs := lang
		if lang == "" {
			parseAs = Python // the wider name syntax; R names are a subset
		}
		s, err := ParseSpec(parseAs, name)
		if err != nil || len(s.Constraints)+len(s.Extras) > 0 {
			return nil, fmt.Errorf("%s[%d]: %q is not a package name (optionally prefixed python: or r:; no wildcards, no versions)", FieldApproved, i, text)
		}
		if p.approved[lang] == nil {
			p.approved[lang] = map[string]bool{}
		}
		p.approved[lang][s.Key] = true
	}
	return p, nil
}

// MaxPackages is max_packages_per_build.
func (p *Policy) MaxPackages() int { return p.maxPackages }

// Check parses and judges the packages one build requests for lang. The error
// is a request-level refusal: a spec that does not parse, a duplicate, or too
// many packages; then Result is empty. Otherwise each package has a decision,
// and Result.Err says why any is not allowed.
func (p *Policy) Check(specs []string, lang Language) (Result, error) {
	if lang != Python && lang != R {
		return Result{}, refused(RuleSpec, "", "", fmt.Sprintf("unknown language %q; use \"python\" or \"r\"", lang))
	}
	if len(specs) == 0 {
		return Result{}, refused(RuleSpec, "", "", "no packages requested; name at least one")
	}
	if len(specs) > p.maxPackages {
		return Result{}, refused(RuleMaxPackages, "", "", fmt.Sprintf(
			"%d packages requested, more than %s (%d); request fewer, or an operator raises the limit",
			len(specs), FieldMaxPackages, p.maxPackages))
	}
	var (
		errs   []error
		parsed = make([]Spec, len(specs))
		seen   = map[string]string{}
	)
	for i, in := range specs {
		s, err := ParseSpec(lang, in)
		if err != nil {
			errs = append(errs, refused(RuleSpec, in, "", err.Error()))
			continue
		}
		if first, dup := seen[s.Key]; dup {
			errs = append(errs, refused(RuleDuplicate, in, "", fmt.Sprintf(
				"package %q is requested twice (%q and %q); name it once, joining constraints with a comma (numpy>=1.24,<2)",
				s.Key, first, in)))
			continue
		}
		seen[s.Key] = in
		parsed[i] = s
	}
	if len(errs) > 0 {
		return Result{}, errors.Join(errs...)
	}
	res := Result{Decisions: make([]Decision, len(specs))}
	for i, s := range parsed {
		res.Decisions[i] = p.decide(specs[i], s)
	}
	return res, nil
}

func (p *Policy) decide(in string, s Spec) Decision {
	d := Decision{Input: in, Spec: s}
	// A blocklisted name is refused whoever approved it.
	if pat, ok := p.block.Match(s.Language, s.Key); ok {
		d.Verdict, d.Rule, d.Pattern = Blocked, RuleBlocklist, &pat
		d.Detail = fmt.Sprintf("%s package %q is blocked by the pattern %s; it cannot be approved: choose another package (operators: the list is set by %s)",
			s.Language, s.Name, pat, FieldBlocklistPath)
		return d
	}
	if p.approved[""][s.Key] || p.approved[s.Language][s.Key] {
		d.Verdict, d.Rule = Allowed, RuleApproved
		d.Detail = fmt.Sprintf("%s package %q is approved in %s", s.Language, s.Name, FieldApproved)
		return d
	}
	for _, pat := range p.approval {
		if pat.Matches(s.Language, s.Key) {
			d.Verdict, d.Rule, d.Pattern = NeedsApproval, RuleApproval, &pat
			d.Detail = fmt.Sprintf("%s package %q needs an operator's approval: it matches %s; an operator pre-approves it by adding %q to %s",
				s.Language, s.Name, pat, approvedEntry(s), FieldApproved)
			return d
		}
	}
	if !p.useAllowlist {
		d.Verdict, d.Rule = Allowed, RuleNoAllowlist
		d.Detail = fmt.Sprintf("%s is false", FieldUseAllowlist)
		return d
	}
	if pat, ok := p.allow.Match(s.Language, s.Key); ok {
		d.Verdict, d.Rule, d.Pattern = Allowed, RuleAllowlist, &pat
		d.Detail = fmt.Sprintf("%s package %q is allowed by %s", s.Language, s.Name, pat)
		return d
	}
	d.Verdict, d.Rule = Blocked, RuleAllowlist
	d.Detail = fmt.Sprintf("%s package %q is not on the allowlist (%s); an operator pre-approves it by adding %q to %s, or adds it to the list file named by %s",
		s.Language, s.Name, p.allow.Source, approvedEntry(s), FieldApproved, FieldAllowlistPath)
	return d
}

func approvedEntry(s Spec) string { return string(s.Language) + ":" + s.Name }

// CheckLocked checks the packages a resolved lock would install — the
// requested ones and every dependency — against the blocklist alone: the
// allowlist and approvals judge what a user asks for, the blocklist judges
// everything that lands in an image. names are distribution names as a
// resolver writes them.
func (p *Policy) CheckLocked(names []string, lang Language) error {
	var errs []error
	for _, n := range names {
		key := NormalizeName(n)
		if pat, ok := p.block.Match(lang, key); ok {
			errs = append(errs, refused(RuleBlocklist, n, pat.String(), fmt.Sprintf(
				"the resolved %s environment contains %q, blocked by the pattern %s; remove the package that depends on it (operators: the list is set by %s)",
				lang, n, pat, FieldBlocklistPath)))
		}
	}
	return errors.Join(errs...)
}
