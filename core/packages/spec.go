// Package packages is the core's package policy for custom environment
// builds: it parses what a request asks to install (a strict subset of PEP
// 508), checks it against the allowlist, blocklist and approval patterns, and
// limits how many builds a user may start. It is pure logic: no Podman, no
// network, file reads only for the configured lists.
package packages

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Language says which ecosystem a spec names a package of.
type Language string

// Languages a builder may install packages for.
const (
	Python Language = "python"
	R      Language = "r"
)

// Limits on a single spec. PyPI has no name limit, but a name beyond 100
// characters is never a real package and only grows image labels and logs.
const (
	MaxSpecLen = 200
	MaxNameLen = 100
)

// Spec is one accepted package request.
type Spec struct {
	Language Language
	// Name is the canonical name: PEP 503-normalised for Python; as written
	// for R, whose library() is case-sensitive.
	Name string
	// Key is the PEP 503-normalised name every list lookup uses.
	Key         string
	Extras      []string // normalised, sorted, unique (Python only)
	Constraints []Constraint
}

// Constraint is one version clause, e.g. ">=" "1.24".
type Constraint struct {
	Op      string
	Version string // lower-case, leading zeros stripped; may end in ".*" for == and !=
}

// String is the canonical form handed to a package tool: no whitespace, no
// '@' or ';', never a leading '-', and it parses back to the same Spec.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Name)
	if len(s.Extras) > 0 {
		b.WriteString("[" + strings.Join(s.Extras, ",") + "]")
	}
	for i, c := range s.Constraints {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Op + c.Version)
	}
	return b.String()
}

// SpecError is a refused spec: what was wrong and what to write instead.
type SpecError struct {
	Spec   string
	Reason string
	Hint   string
}

func (e *SpecError) Error() string {
	msg := fmt.Sprintf("package spec %s: %s", quoteSpec(e.Spec), e.Reason)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// quoteSpec quotes with Go escapes (so a newline or NUL shows as \n or \x00
// and never breaks a log line) and shortens over-long input.
func quoteSpec(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%q…(%d bytes)", s[:60], len(s))
	}
	return fmt.Sprintf("%q", s)
}

const (
	hintPython = "write a package name with optional extras and version constraints, e.g. numpy>=1.24,<2 or pandas[excel]==2.1.4"
	hintR      = "write an R package name only, e.g. ggplot2 or data.table"
)

// NormalizeName is PEP 503's normalisation: runs of '-', '_' and '.' become
// one '-', and letters are lower-cased.
func NormalizeName(name string) string {
	var b strings.Builder
	sep := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('-')
		}
		sep = false
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// ParseSpec parses one package request for lang. Python accepts a PEP 508
// subset: name, optional [extras], optional comma-separated version clauses
// (==, !=, <=, >=, <, >, ~= with PEP 440 public versions; == and != may end
// in .*). R accepts a bare CRAN package name. Everything else — options, URLs,
// paths, markers, control or non-ASCII characters — is refused.
func ParseSpec(lang Language, raw string) (Spec, error) {
	fail := func(reason, hint string) (Spec, error) {
		return Spec{}, &SpecError{Spec: raw, Reason: reason, Hint: hint}
	}
	hint := hintPython
	if lang == R {
		hint = hintR
	} else if lang != Python {
		return fail(fmt.Sprintf("unknown language %q", lang), `use "python" or "r"`)
	}
	if len(raw) > MaxSpecLen {
		return fail(fmt.Sprintf("is %d bytes long, more than %d", len(raw), MaxSpecLen), hint)
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c >= utf8.RuneSelf:
			r, _ := utf8.DecodeRuneInString(raw[i:])
			return fail(fmt.Sprintf("contains the non-ASCII character %U at byte %d (look-alike letters are not accepted)", r, i), hint)
		case c < 0x20 || c == 0x7f:
			return fail(fmt.Sprintf("contains the control character %q at byte %d (tabs, newlines and NUL are not accepted)", c, i), hint)
		}
	}
	s := strings.Trim(raw, " ")
	switch {
	case s == "":
		return fail("is empty", hint)
	case s[0] == '-':
		return fail("starts with '-': options are never passed to a package tool", hint)
	case strings.Contains(s, "@"):
		return fail("is a direct reference (name @ URL): packages come only from the configured index by name", hint)
	case strings.Contains(s, "://"):
		return fail("is a URL: packages come only from the configured index by name", hint)
	case strings.Contains(s, ";"):
		return fail("has an environment marker (;): markers are not accepted", hint)
	case strings.ContainsAny(s, `/\`) || s[0] == '.' || s[0] == '~':
		return fail("is a file path: only package names are accepted", hint)
	}

	p := parser{s: s}
	name := p.name()
	if name == "" {
		return fail(fmt.Sprintf("does not start with a package name (letters, digits, '-', '_', '.'); found %q", p.rest()), hint)
	}
	if len(name) > MaxNameLen {
		return fail(fmt.Sprintf("has a %d-character name, more than %d", len(name), MaxNameLen), hint)
	}
	if lang == R {
		return parseR(name, p.rest(), fail)
	}
	spec := Spec{Language: Python, Name: NormalizeName(name), Key: NormalizeName(name)}

	p.spaces()
	if p.peek() == '[' {
		p.i++
		extras, reason := p.extras()
		if reason != "" {
			return fail(reason, hint)
		}
		spec.Extras = extras
		p.spaces()
	}
	if p.peek() == '(' {
		return fail("has parenthesised version constraints", "write them without parentheses, e.g. numpy>=1.24,<2")
	}
	for !p.done() {
		if len(spec.Constraints) > 0 {
			if p.peek() != ',' {
				return fail(fmt.Sprintf("has %q where ',' or the end was expected", p.rest()), hint)
			}
			p.i++
			p.spaces()
		}
		c, reason := p.constraint()
		if reason != "" {
			return fail(reason, hint)
		}
		spec.Constraints = append(spec.Constraints, c)
		p.spaces()
	}
	return spec, nil
}

func parseR(name, rest string, fail func(string, string) (Spec, error)) (Spec, error) {
	if rest != "" {
		return fail(fmt.Sprintf("has %q after the name: R packages are installed at the version their Debian release ships, without extras or constraints", rest), hintR)
	}
	// CRAN: letters, digits and '.', starting with a letter, not ending in
	// '.', at least two characters.
	ok := len(name) >= 2 && isLetter(name[0]) && name[len(name)-1] != '.'
	for i := 0; ok && i < len(name); i++ {
		ok = isLetter(name[i]) || isDigit(name[i]) || name[i] == '.'
	}
	if !ok {
		return fail(fmt.Sprintf("%q is not an R package name (letters, digits and '.', starting with a letter, at least two characters)", name), hintR)
	}
	return Spec{Language: R, Name: name, Key: NormalizeName(name)}, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }
func (p *parser) rest() string {
	return p.s[p.i:]
}
func (p *parser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}
func (p *parser) spaces() {
	for p.peek() == ' ' {
		p.i++
	}
}

func isLetter(c byte) bool { return 'A' <= c&^0x20 && c&^0x20 <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool  { return isLetter(c) || isDigit(c) }

// name reads a PEP 508 identifier: alphanumerics with '-', '_' or '.'
// inside, never at either end.
func (p *parser) name() string {
	start := p.i
	if !isAlnum(p.peek()) {
		return ""
	}
	end := p.i
	for !p.done() {
		c := p.s[p.i]
		if isAlnum(c) {
			p.i++
			end = p.i
		} else if c == '-' || c == '_' || c == '.' {
			p.i++
		} else {
			break
		}
	}
	p.i = end // trailing separators are not part of the name
	return p.s[start:end]
}

func (p *parser) extras() ([]string, string) {
	seen := map[string]bool{}
	var out []string
	for {
		p.spaces()
		e := p.name()
		if e == "" {
			return nil, fmt.Sprintf("has an invalid extra at %q (extras are names like [excel,plot])", p.rest())
		}
		if n := NormalizeName(e); !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
		p.spaces()
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			slices.Sort(out)
			return out, ""
		default:
			return nil, fmt.Sprintf("has %q where ',' or ']' was expected in the extras", p.rest())
		}
	}
}

// Operators, longest first so that "<=" is not read as "<".
var operators = []string{"===", "==", "!=", "<=", ">=", "~=", "<", ">"}

func (p *parser) constraint() (Constraint, string) {
	var op string
	for _, o := range operators {
		if strings.HasPrefix(p.rest(), o) {
			op = o
			break
		}
	}
	switch op {
	case "":
		return Constraint{}, fmt.Sprintf("has %q where a version operator (==, !=, <=, >=, <, >, ~=) was expected", p.rest())
	case "===":
		return Constraint{}, "uses '===' (arbitrary string equality), which is not accepted; use '==' with a PEP 440 version"
	}
	p.i += len(op)
	p.spaces()
	start := p.i
	for !p.done() && p.s[p.i] != ',' && p.s[p.i] != ' ' {
		p.i++
	}
	v, reason := normalizeVersion(op, p.s[start:p.i])
	if reason != "" {
		return Constraint{}, reason
	}
	return Constraint{Op: op, Version: v}, ""
}

// normalizeVersion accepts the canonical spelling of a PEP 440 public
// version — [N!]N(.N)*[{a|b|rc}N][.postN][.devN], any letter case — plus a
// trailing ".*" after the release for == and !=. It returns it lower-cased
// with leading zeros stripped from every number.
func normalizeVersion(op, v string) (string, string) {
	bad := func(why string) (string, string) {
		return "", fmt.Sprintf("has the version %q after %s, which %s (PEP 440 public versions such as 1.24, 2.0rc1, 1.0.post2, 3!1.0)", v, op, why)
	}
	if v == "" {
		return bad("is empty")
	}
	s := strings.ToLower(v)
	var out strings.Builder
	num := func() bool { // one run of digits, leading zeros dropped
		i := 0
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == 0 {
			return false
		}
		d := strings.TrimLeft(s[:i], "0")
		if d == "" {
			d = "0"
		}
		out.WriteString(d)
		s = s[i:]
		return true
	}
	// Epoch or first release number.
	if !num() {
		return bad("does not start with a number")
	}
	if strings.HasPrefix(s, "!") {
		out.WriteByte('!')
		s = s[1:]
		if !num() {
			return bad("has no release number after the epoch")
		}
	}
	release := 1
	for strings.HasPrefix(s, ".") && len(s) > 1 && isDigit(s[1]) {
		out.WriteByte('.')
		s = s[1:]
		num()
		release++
	}
	if s == ".*" {
		if op != "==" && op != "!=" {
			return bad("ends in .*, allowed only after == and !=")
		}
		out.WriteString(".*")
		return out.String(), ""
	}
	if op == "~=" && release < 2 {
		return bad("needs at least two release numbers after ~= (e.g. ~=1.4)")
	}
	for _, pre := range []string{"rc", "a", "b"} {
		if strings.HasPrefix(s, pre) {
			out.WriteString(pre)
			s = s[len(pre):]
			if !num() {
				return bad("has a pre-release tag without a number")
			}
			break
		}
	}
	for _, tag := range []string{".post", ".dev"} {
		if strings.HasPrefix(s, tag) {
			out.WriteString(tag)
			s = s[len(tag):]
			if !num() {
				return bad("has " + tag + " without a number")
			}
		}
	}
	if s != "" {
		if s[0] == '+' {
			return bad("has a local version label (+...), which no index serves")
		}
		return bad(fmt.Sprintf("has %q that is not part of a version", s))
	}
	return out.String(), ""
}
