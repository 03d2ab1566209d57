package sdktest

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Leaks reports where piece (a distinctive part of a secret, ASCII) can be
// read back from text by decoding it the ways a program encodes: as it is,
// after undoing JSON, Go or Python escapes (up to three levels of
// nesting), URL encoding, HTML entities, and inside every base64 (std or
// URL alphabet, at each of the four character offsets, line breaks
// removed) or hex string. It decodes rather than encodes, so it checks a
// redactor by other means than the redactor's own. Empty: no leak.
func Leaks(text, piece string) []string {
	var out []string
	check := func(how, s string) {
		if strings.Contains(s, piece) {
			out = append(out, how)
		}
	}
	views := map[string]string{"as is": text}
	un := text
	for level := 1; level <= 3; level++ {
		un = unescape(un)
		views[fmt.Sprintf("unescaped %d", level)] = un
	}
	views["URL-decoded"] = unpercent(text)
	views["URL-decoded, unescaped"] = unescape(unescape(unpercent(text)))
	views["HTML-decoded"] = html.UnescapeString(text)
	for how, v := range views {
		check(how, v)
	}
	flat := strings.NewReplacer("\r", "", "\n", "", `\n`, "", `\r`, "", `\/`, "/", "%2F", "/", "%2B", "+", "%3D", "=", "%2f", "/", "%2b", "+", "%3d", "=").Replace(text)
	for _, run := range base64Run.FindAllString(flat, -1) {
		std := strings.NewReplacer("-", "+", "_", "/").Replace(strings.TrimRight(run, "="))
		for off := 0; off < 4 && off < len(std); off++ {
			s := std[off:]
			s = s[:len(s)-len(s)%4]
			if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
				check(fmt.Sprintf("base64 %.20q… at offset %d", run, off), string(b))
				check(fmt.Sprintf("base64 %.20q… at offset %d, unescaped", run, off), unescape(string(b)))
			}
		}
	}
	for _, run := range hexRun.FindAllString(text, -1) {
		for off := 0; off < 2 && off < len(run); off++ {
			s := run[off:]
			if b, err := hex.DecodeString(s[:len(s)-len(s)%2]); err == nil {
				check(fmt.Sprintf("hex %.20q… at offset %d", run, off), string(b))
			}
		}
	}
	return out
}

var (
	base64Run = regexp.MustCompile(`[A-Za-z0-9+/_=-]{8,}`)
	hexRun    = regexp.MustCompile(`[0-9A-Fa-f]{8,}`)
	escapeRe  = regexp.MustCompile(`\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|["/'\\nrt])`)
	percentRe = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)
)

// unescape undoes one level of backslash escapes (\uXXXX with surrogate
// pairs, \UXXXXXXXX, \xXX as a code point, \" \/ \' \\ \n \r \t).
func unescape(s string) string {
	var units []uint16 // a pending high surrogate
	s = escapeRe.ReplaceAllStringFunc(s, func(m string) string {
		switch m[1] {
		case 'u', 'U', 'x':
			v, _ := strconv.ParseUint(m[2:], 16, 32)
			r := rune(v)
			if utf16.IsSurrogate(r) {
				if len(units) == 1 {
					r = utf16.DecodeRune(rune(units[0]), r)
					units = nil
					return string(r)
				}
				units = []uint16{uint16(r)}
				return ""
			}
			return string(r)
		case 'n':
			return "\n"
		case 'r':
			return "\r"
		case 't':
			return "\t"
		}
		return m[1:]
	})
	return s
}

// unpercent undoes URL encoding ("+" as space too), leniently.
func unpercent(s string) string {
	s = strings.ReplaceAll(s, "+", " ")
	return percentRe.ReplaceAllStringFunc(s, func(m string) string {
		v, _ := strconv.ParseUint(m[1:], 16, 8)
		return string([]byte{byte(v)})
	})
}
