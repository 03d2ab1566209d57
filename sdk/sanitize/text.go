// Package sanitize makes what user code produces safe to hand on: text that
// is valid UTF-8 (protobuf refuses anything else, and a refused reply loses
// the whole result), and images without active content. The plugin shims
// apply it to everything that crosses the plugin boundary; backends may use
// it too.
package sanitize

import (
	"strings"
	"unicode/utf8"
)

// Replacement is what invalid UTF-8 becomes.
const Replacement = "\uFFFD"

// UTF8 returns s with every run of invalid UTF-8 bytes replaced by U+FFFD,
// and whether anything was replaced.
func UTF8(s string) (string, bool) {
	if utf8.ValidString(s) {
		return s, false
	}
	return strings.ToValidUTF8(s, Replacement), true
}

// Cut returns at most n bytes of s, never splitting a character: a cap on
// text must not itself make the text invalid.
func Cut(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		i = n // not UTF-8 here anyway: cut where asked
	}
	return s[:i]
}

// TrimCut drops an incomplete character at the end of s, which is what a
// byte cap leaves when it cuts through one. Use it on text that was cut, so
// that the cut is not mistaken for invalid output.
func TrimCut(s string) string {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(s); k++ {
		b := s[len(s)-k]
		if !utf8.RuneStart(b) {
			continue
		}
		if b >= 0xC0 && !utf8.FullRuneInString(s[len(s)-k:]) {
			return s[:len(s)-k]
		}
		break
	}
	return s
}

// InvalidUTF8Notice is the notice a result carries when invalid UTF-8 in
// the named fields was replaced.
func InvalidUTF8Notice(fields []string) string {
	return "the output was not valid UTF-8: invalid bytes in " + strings.Join(fields, ", ") +
		" were replaced with U+FFFD (" + Replacement + "); write text, or encode binary data (base64) before printing it"
}

// JSONLen is how many bytes s takes inside a JSON string as encoding/json
// writes it with HTML escaping on (go-sdk's text content does): a control
// byte takes six (\u0001), so a cap on raw bytes does not bound a message.
func JSONLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		w := jsonWidth(s, i)
		n += w.out
		i += w.in
	}
	return n
}

// CutJSON returns the longest prefix of s whose JSONLen is at most n,
// never splitting a character.
func CutJSON(s string, n int) string {
	used := 0
	for i := 0; i < len(s); {
		w := jsonWidth(s, i)
		if used+w.out > n {
			return s[:i]
		}
		used += w.out
		i += w.in
	}
	return s
}

type width struct{ in, out int }

// jsonWidth is the character at s[i]: its bytes in s and in JSON.
func jsonWidth(s string, i int) width {
	c := s[i]
	if c < utf8.RuneSelf {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			return width{1, 2}
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			return width{1, 6}
		}
		return width{1, 1}
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size == 1:
		return width{1, 6} // \ufffd
	case r == '\u2028' || r == '\u2029':
		return width{size, 6}
	}
	return width{size, size}
}
