package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// reserved are the words an identifier in the generated Python and R must
// not be: Python keywords (and soft keywords that break as parameters),
// R reserved words, and names the generated code itself uses.
var reserved = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`False None True and as assert async await break class continue def del elif else except
		finally for from global if import in is lambda nonlocal not or pass raise return try while with yield
		if else repeat while function for next break TRUE FALSE NULL Inf NaN NA NA_integer_ NA_real_ NA_character_ NA_complex_ in`) {
		reserved[w] = true
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// maxIdent bounds a mapped identifier (file names are built from it).
const maxIdent = 64

// sanitize turns a name into an identifier valid in Python and R: every
// character other than an ASCII letter, digit or '_' becomes '_', a name
// not starting with a letter gets prefix, a reserved word gets a trailing
// '_'. It does not resolve collisions; mapNames does.
func sanitize(name, prefix string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		s = prefix + s
	}
	if len(s) > maxIdent {
		s = s[:maxIdent]
	}
	if reserved[s] {
		s += "_"
	}
	return s
}

// mapNames maps names to distinct identifiers, deterministically whatever
// the input order: names that already are identifiers (and not reserved)
// keep themselves; the others, in sorted order, get their sanitized form,
// with _2, _3, ... appended while it is taken. taken holds identifiers
// that are already in use (e.g. the generated code's own). The result maps
// each original name to its identifier; nothing is dropped.
func mapNames(names []string, prefix string, taken map[string]bool) map[string]string {
	out := make(map[string]string, len(names))
	used := map[string]bool{}
	for k := range taken {
		used[k] = true
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var rest []string
	for _, n := range sorted {
		if _, dup := out[n]; dup {
			continue
		}
		if identRE.MatchString(n) && len(n) <= maxIdent && !reserved[n] && !used[n] {
			out[n] = n
			used[n] = true
		} else {
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		if _, dup := out[n]; dup {
			continue
		}
		base := sanitize(n, prefix)
		id := base
		for i := 2; used[id]; i++ {
			id = fmt.Sprintf("%s_%d", base, i)
		}
		out[n] = id
		used[id] = true
	}
	return out
}
