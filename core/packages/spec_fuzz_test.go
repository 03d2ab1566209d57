package packages

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParseSpec checks what reaches a package tool: anything accepted has a
// canonical form that parses back identically and that no tool can read as
// an option, a URL, a path or a marker. The seed corpus is in
// testdata/fuzz/FuzzParseSpec; run longer with
// go test -run '^$' -fuzz FuzzParseSpec ./core/packages/
const canonicalChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.[],<>=!~*"

func FuzzParseSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, in string) {
		for _, lang := range []Language{Python, R} {
			s, err := ParseSpec(lang, in)
			if err != nil {
				if _, ok := err.(*SpecError); !ok {
					t.Fatalf("%s %q: error of type %T", lang, in, err)
				}
				continue
			}
			c := s.String()
			switch {
			case c == "", c[0] == '-':
				t.Fatalf("%s %q: canonical %q is empty or starts with '-'", lang, in, c)
			case strings.ContainsAny(c, "@;/\\ "):
				t.Fatalf("%s %q: canonical %q has a forbidden character", lang, in, c)
			case len(c) > MaxSpecLen:
				t.Fatalf("%s %q: canonical %q is longer than the limit", lang, in, c)
			}
			// Only what names, extras and versions need: no '#' (comment),
			// '$' (variable expansion in requirements files), quotes or spaces.
			if strings.Trim(c, canonicalChars) != "" {
				t.Fatalf("%s %q: canonical %q has a character outside %q", lang, in, c, canonicalChars)
			}
			if s.Key == "" || s.Key != NormalizeName(s.Key) || strings.Trim(s.Key, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
				t.Fatalf("%s %q: key %q is not a normalised name", lang, in, s.Key)
			}
			again, err := ParseSpec(lang, c)
			if err != nil {
				t.Fatalf("%s %q: canonical %q refused: %v", lang, in, c, err)
			}
			if !reflect.DeepEqual(again, s) {
				t.Fatalf("%s %q: canonical %q parses to %+v, not %+v", lang, in, c, again, s)
			}
			if again.String() != c {
				t.Fatalf("%s %q: canonical form is not stable: %q then %q", lang, in, c, again.String())
			}
		}
	})
}
