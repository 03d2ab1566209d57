package packages

import (
	"bufio"
	"embed"
	"fmt"
	"os"
	"path"
	"strings"
)

// The built-in lists, used when allowlist_path or blocklist_path is empty.
// An operator's file replaces the built-in one; copy it as a starting point.
//
//go:embed defaults/allowlist.txt defaults/blocklist.txt
var defaults embed.FS

// Pattern is one list entry: a glob over normalised names, for one language
// or (Lang "") all of them.
type Pattern struct {
	Lang   Language
	Glob   string // normalised: lower case, separators folded to '-'
	Text   string // as written
	Source string // where it was written, e.g. "built-in blocklist line 12"
}

// Matches reports whether the pattern covers a normalised name in lang.
func (p Pattern) Matches(lang Language, key string) bool {
	if p.Lang != "" && p.Lang != lang {
		return false
	}
	ok, _ := path.Match(p.Glob, key) // Glob is validated: no error is possible
	return ok
}

func (p Pattern) String() string { return fmt.Sprintf("%q (%s)", p.Text, p.Source) }

// ParsePattern reads "[python:|r:]GLOB", where GLOB is a package name that
// may use '*' and '?'. It is normalised like a name, so "*_dev" and "*-dev"
// are the same pattern.
func ParsePattern(text, source string) (Pattern, error) {
	p := Pattern{Text: text, Source: source}
	glob := text
	if l, rest, ok := strings.Cut(text, ":"); ok {
		switch Language(l) {
		case Python, R:
			p.Lang, glob = Language(l), rest
		default:
			return p, fmt.Errorf("%s: %q has an unknown language prefix %q (use python: or r:, or none for both)", source, text, l)
		}
	}
	if glob == "" {
		return p, fmt.Errorf("%s: %q has no name pattern", source, text)
	}
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch {
		case isAlnum(c), c == '-', c == '_', c == '.', c == '*', c == '?':
			b.WriteByte(c)
		default:
			return p, fmt.Errorf("%s: %q has %q; a pattern is a package name with optional '*' and '?' wildcards, e.g. *crypto*", source, text, c)
		}
	}
	// Wildcards are not separators, so folding the whole glob folds each
	// run between them as the names it is matched against were folded.
	p.Glob = NormalizeName(b.String())
	if p.Glob == "" {
		return p, fmt.Errorf("%s: %q matches no package name", source, text)
	}
	return p, nil
}

// List is an ordered set of patterns; the first match wins.
type List struct {
	Name     string // "allowlist" or "blocklist"
	Source   string // "built-in allowlist" or the file's path
	Patterns []Pattern
}

// Match returns the first pattern covering key in lang.
func (l *List) Match(lang Language, key string) (Pattern, bool) {
	for _, p := range l.Patterns {
		if p.Matches(lang, key) {
			return p, true
		}
	}
	return Pattern{}, false
}

// LoadList reads a list file, or the built-in list of that name when file is
// empty. One pattern per line; '#' starts a comment; blank lines are
// skipped. Any bad line fails the whole list: a list half-read would let
// through what its author meant to stop.
func LoadList(name, file string) (*List, error) {
	var (
		data   []byte
		err    error
		source = file
	)
	if file == "" {
		source = "built-in " + name
		data, err = defaults.ReadFile("defaults/" + name + ".txt")
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s: %w", name, err)
	}
	return parseList(name, source, string(data))
}

func parseList(name, source, text string) (*List, error) {
	l := &List{Name: name, Source: source}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		p, err := ParsePattern(line, fmt.Sprintf("%s line %d", source, n))
		if err != nil {
			return nil, err
		}
		l.Patterns = append(l.Patterns, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the %s %s: %w", name, source, err)
	}
	return l, nil
}
