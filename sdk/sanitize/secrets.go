package sanitize

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Redacted replaces a secret.
const Redacted = "[redacted]"

// Secrets removes secret values from text a tool produced, in the forms a
// program is likely to print them in, not only as they are: a server that
// echoes its environment as JSON escapes non-ASCII (\u00e4, either case,
// surrogate pairs for the rest) and maybe "/" (\/), nests JSON in JSON
// (\\u00e4), URL-encodes (%22 either case, space as %20 or +), quotes as
// Go or Python do (\xe4, \U0001f600), writes HTML entities, base64 (std or
// URL alphabet, padded or not, at any of the three alignments inside a
// longer base64 string, broken into lines or not) or hex (either case).
//
// Escapes are matched character by character, in any mix: the text is
// decoded as it is scanned, so no list of encoded forms can miss a
// combination. Base64 and hex are matched as encodings of the value (and
// of its JSON-escaped form); the base64 characters only partly made of a
// secret's bits, next to a match, go with it.
type Secrets struct {
	values  [][]byte  // longest first
	first   [256]bool // bytes a match may start with
	literal []literal // base64 and hex forms
}

// literal is an encoded form matched as it is (hex: case-insensitively).
type literal struct {
	s           string
	hex         bool
	lead, trail bool // a partly-secret base64 character may precede / follow
	url         bool // the URL base64 alphabet (else std)
}

// minBase64 is the shortest base64 form that is matched: shorter ones (a
// secret of 4 or 5 bytes) would match ordinary words.
const minBase64 = 8

// NewSecrets matches values of at least min bytes, and each printable run
// of at least min bytes inside a value (a value with a control character
// may be printed in pieces).
func NewSecrets(values []string, min int) *Secrets {
	if min < 1 {
		min = 1
	}
	seen := map[string]bool{}
	add := func(v string) {
		if len(v) >= min {
			seen[v] = true
		}
	}
	for _, v := range values {
		add(v)
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) {
			add(part)
		}
	}
	s := &Secrets{}
	if len(seen) == 0 {
		return s
	}
	list := make([]string, 0, len(seen))
	for v := range seen {
		list = append(list, v)
	}
	sort.Slice(list, func(i, j int) bool {
		return len(list[i]) > len(list[j]) || len(list[i]) == len(list[j]) && list[i] < list[j]
	})
	lits := map[literal]bool{}
	for _, v := range list {
		s.values = append(s.values, []byte(v))
		for _, b := range []byte{v[0], '%', '+', '\\', '&'} {
			s.first[b] = true
		}
		forms := map[string]bool{v: true}
		for _, ascii := range []bool{false, true} {
			for _, html := range []bool{false, true} {
				forms[jsonForm(v, ascii, html)] = true
			}
		}
		for f := range forms {
			for _, enc := range []struct {
				e   *base64.Encoding
				url bool
			}{{base64.RawStdEncoding, false}, {base64.RawURLEncoding, true}} {
				for a := 0; a < 3; a++ {
					core, lead, trail := base64Core(enc.e, f, a)
					if len(core) >= minBase64 {
						lits[literal{s: core, lead: lead, trail: trail, url: enc.url}] = true
					}
				}
			}
			if h := hex.EncodeToString([]byte(f)); len(h) >= minBase64 {
				lits[literal{s: h, hex: true}] = true
			}
		}
	}
	for l := range lits {
		s.literal = append(s.literal, l)
	}
	sort.Slice(s.literal, func(i, j int) bool {
		a, b := s.literal[i].s, s.literal[j].s
		return len(a) > len(b) || len(a) == len(b) && a < b
	})
	return s
}

// jsonForm is v as JSON writes it inside quotes: with ascii every
// non-ASCII character as \uXXXX (Python's default, ensure_ascii) rather
// than as UTF-8; with html "&<>" as \u0026... (Go's json.Marshal).
func jsonForm(v string, ascii, html bool) string {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(html)
	_ = e.Encode(v) // a string always encodes
	inner := strings.TrimSuffix(buf.String(), "\n")
	inner = inner[1 : len(inner)-1]
	if !ascii {
		return inner
	}
	var out strings.Builder
	for _, r := range inner {
		switch {
		case r < utf8.RuneSelf:
			out.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out.WriteString(`\u` + hex4(r1) + `\u` + hex4(r2))
		default:
			out.WriteString(`\u` + hex4(r))
		}
	}
	return out.String()
}

func hex4(r rune) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[r>>12&0xf], digits[r>>8&0xf], digits[r>>4&0xf], digits[r&0xf]})
}

// base64Core is the part of f's base64 form that f alone determines when
// f starts a bytes into a 3-byte group: the characters all of whose six
// bits are f's. lead and trail say whether a character partly made of f's
// bits precedes or follows it.
func base64Core(e *base64.Encoding, f string, a int) (core string, lead, trail bool) {
	enc := e.EncodeToString(append(make([]byte, a), f...))
	lo, hi := (8*a+5)/6, (8*a+8*len(f))/6 // [lo, hi): whole characters
	if hi > len(enc) {
		hi = len(enc)
	}
	if lo >= hi {
		return "", false, false
	}
	return enc[lo:hi], (8*a)%6 != 0, (8*a+8*len(f))%6 != 0
}

// String returns text without the secrets.
func (s *Secrets) String(text string) string {
	if s == nil || len(s.values) == 0 || text == "" {
		return text
	}
	spans := s.escaped(text)
	spans = append(spans, s.encoded(text)...)
	if len(spans) == 0 {
		return text
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var out strings.Builder
	at := 0
	for i := 0; i < len(spans); {
		start, end := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= end; i++ {
			end = max(end, spans[i][1])
		}
		if start < at {
			start = at
		}
		out.WriteString(text[at:start])
		out.WriteString(Redacted)
		at = end
	}
	out.WriteString(text[at:])
	return out.String()
}

// JSON returns raw (a JSON document) without the secrets, still valid
// JSON. Strings are scrubbed as they decode (so JSON's own escapes, in any
// mix with other encodings, hide nothing), keys and numbers too; a
// document with nothing to scrub comes back as it was, byte for byte.
// Raw that is not JSON is scrubbed as text.
func (s *Secrets) JSON(raw []byte) []byte {
	if s == nil || len(s.values) == 0 || len(raw) == 0 {
		return raw
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return []byte(s.String(string(raw)))
	}
	clean, changed := s.value(v)
	if !changed {
		// Nothing inside any value: a secret could still span the text's
		// structure (a secret holding `", "`); scrub the text, if that
		// keeps it JSON.
		if t := s.String(string(raw)); t != string(raw) && json.Valid([]byte(t)) {
			return []byte(t)
		}
		return raw
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if e.Encode(clean) != nil {
		return []byte(s.String(string(raw)))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Value scrubs a decoded JSON value: every key and string, and a number
// whose text is (or holds) a secret becomes the string Redacted.
func (s *Secrets) Value(v any) any {
	out, _ := s.value(v)
	return out
}

// value is Value and whether anything was scrubbed.
func (s *Secrets) value(v any) (any, bool) {
	switch v := v.(type) {
	case string:
		c := s.String(v)
		return c, c != v
	case json.Number:
		if s.String(v.String()) != v.String() {
			return Redacted, true
		}
		return v, false
	case float64:
		b, _ := json.Marshal(v)
		if s.String(string(b)) != string(b) {
			return Redacted, true
		}
		return v, false
	case []any:
		changed := false
		for i := range v {
			var c bool
			v[i], c = s.value(v[i])
			changed = changed || c
		}
		return v, changed
	case map[string]any:
		out := make(map[string]any, len(v))
		changed := false
		for k, x := range v {
			ck := s.String(k)
			cx, c := s.value(x)
			out[ck] = cx
			changed = changed || c || ck != k
		}
		return out, changed
	}
	return v, false
}

// escaped finds the secrets written with any mix of escapes: leftmost
// first, longest secret first at each position.
func (s *Secrets) escaped(text string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		for _, v := range s.values {
			m := matcher{text: text, secret: v}
			if end := m.match(i, 0); end >= 0 {
				spans = append(spans, [2]int{i, end})
				i = end - 1
				break
			}
		}
	}
	return spans
}

// matcher matches one secret at one place of text, decoding escapes as it
// goes. failed remembers the (text, secret) positions already tried, so
// that a text full of backslashes cannot make the search exponential.
type matcher struct {
	text   string
	secret []byte
	failed map[[2]int]bool
}

// match returns where the rest of the secret (from j) ends if it is
// written at text[i:], else -1.
func (m *matcher) match(i, j int) int {
	if j == len(m.secret) {
		return i
	}
	if i >= len(m.text) {
		return -1
	}
	key := [2]int{i, j}
	if m.failed[key] {
		return -1
	}
	ts := m.tokens(i, j)
	if len(ts) == 0 {
		return -1 // the common case: nothing to remember
	}
	for _, t := range ts {
		if end := m.match(t.next, j+t.n); end >= 0 {
			return end
		}
	}
	if m.failed == nil {
		m.failed = map[[2]int]bool{}
	}
	m.failed[key] = true
	return -1
}

// token is one way text[i:next] decodes to the next n bytes of the secret.
type token struct{ next, n int }

// tokens lists the ways text at i writes the secret's next bytes (from j).
func (m *matcher) tokens(i, j int) []token {
	text, want := m.text, m.secret[j:]
	var out []token
	c := text[i]
	if c == want[0] {
		out = append(out, token{i + 1, 1})
	}
	// yields adds a token if dec is what the secret holds next.
	yields := func(next int, dec []byte) {
		if len(dec) > 0 && bytes.HasPrefix(want, dec) {
			out = append(out, token{next, len(dec)})
		}
	}
	switch c {
	case '+':
		yields(i+1, []byte{' '})
	case '%':
		b, ok := hexByte(text, i+1)
		if !ok {
			break
		}
		yields(i+3, []byte{b})
		if b == '&' { // a URL-encoded entity: %26quot;
			if dec, next := entityAt(text, i+3); dec != "" {
				yields(next, []byte(dec))
			}
		}
		if b == '\\' && i+3 < len(text) {
			// A URL-encoded JSON escape: %5Cu00e4, %5C%22.
			for _, e := range escapes(text, i+3) {
				yields(e.next, e.dec)
			}
			if q, ok := hexByte(text, i+4); ok && text[i+3] == '%' && simple[q] == q {
				yields(i+6, []byte{q})
			}
		}
	case '&':
		if dec, next := entityAt(text, i+1); dec != "" {
			yields(next, []byte(dec))
		}
	case '\\':
		// A run of backslashes escapes once per level of nesting (JSON in
		// JSON): "\\u00e4" is "\u00e4" is "ä".
		k := i
		for k < len(text) && text[k] == '\\' && k-i <= maxNesting {
			k++
		}
		if k-i > maxNesting {
			break // no escape nests this deep: a run of backslashes
		}
		if want[0] == '\\' {
			for _, n := range []int{2, 4, 8} { // an escaped backslash, nested
				if i+n <= k {
					yields(i+n, []byte{'\\'})
				}
			}
		}
		if k < len(text) {
			for _, e := range escapes(text, k) {
				yields(e.next, e.dec)
				if string(e.dec) == "&" { // an escaped entity: \u0026quot;
					if dec, next := entityAt(text, e.next); dec != "" {
						yields(next, []byte(dec))
					}
				}
			}
		}
	}
	return out
}

// simple are the one-letter escapes of JSON, Go, Python and C.
var simple = map[byte]byte{'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f', 'v': '\v', 'a': '\a', '0': 0,
	'"': '"', '\'': '\'', '/': '/', '`': '`'}

type escape struct {
	next int
	dec  []byte
}

// escapes decodes an escape whose letter is at text[k] (after backslashes).
func escapes(text string, k int) []escape {
	c := text[k]
	if b, ok := simple[c]; ok && !(c == '0' && k+1 < len(text) && isHex(text[k+1])) {
		return []escape{{k + 1, []byte{b}}}
	}
	switch c {
	case 'x': // a byte (Go) or a code point (Python)
		b, ok := hexByte(text, k+1)
		if !ok {
			return nil
		}
		out := []escape{{k + 3, []byte{b}}}
		if b >= utf8.RuneSelf {
			out = append(out, escape{k + 3, utf8.AppendRune(nil, rune(b))})
		}
		return out
	case 'u':
		r, ok := hexRune(text, k+1, 4)
		if !ok {
			return nil
		}
		next := k + 5
		if utf16.IsSurrogate(r) {
			// The low half follows, escaped the same way.
			l := backslashes(text, next)
			if l == next || l >= len(text) || text[l] != 'u' {
				return nil
			}
			r2, ok := hexRune(text, l+1, 4)
			if !ok {
				return nil
			}
			if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
				return nil
			}
			next = l + 5
		}
		return []escape{{next, utf8.AppendRune(nil, r)}}
	case 'U':
		r, ok := hexRune(text, k+1, 8)
		if !ok || !utf8.ValidRune(r) {
			return nil
		}
		return []escape{{k + 9, utf8.AppendRune(nil, r)}}
	}
	return nil
}

// maxNesting bounds the backslashes of one escape: JSON nested in JSON
// doubles them at each level, and no tool nests sixteen deep.
const maxNesting = 16

// backslashes skips the backslashes of an escape from i, raw or
// URL-encoded (%5C), and returns where its letter is.
func backslashes(text string, i int) int {
	for n := 0; i < len(text) && n <= maxNesting; n++ {
		switch {
		case text[i] == '\\':
			i++
		case text[i] == '%' && i+2 < len(text) && text[i+1] == '5' && (text[i+2] == 'C' || text[i+2] == 'c'):
			i += 3
		default:
			return i
		}
	}
	return i
}

// entityAt decodes the HTML character reference whose name starts at
// text[i] (just after its "&"), its characters raw or URL-encoded
// (%23%33%34%3B): what it stands for and where it ends.
func entityAt(text string, i int) (string, int) {
	var name []byte
	for len(name) <= 10 && i < len(text) {
		c, n := text[i], 1
		if b, ok := hexByte(text, i+1); c == '%' && ok {
			c, n = b, 3
		}
		i += n
		if c == ';' {
			if len(name) == 0 {
				return "", 0
			}
			return entity(string(name)), i
		}
		name = append(name, c)
	}
	return "", 0
}

// entity decodes an HTML character reference's name ("quot", "#228", "#xE4").
func entity(name string) string {
	switch name {
	case "quot":
		return `"`
	case "amp":
		return "&"
	case "lt":
		return "<"
	case "gt":
		return ">"
	case "apos":
		return "'"
	}
	if len(name) < 2 || name[0] != '#' {
		return ""
	}
	var r rune
	if name[1] == 'x' || name[1] == 'X' {
		if len(name) < 3 || len(name) > 8 {
			return ""
		}
		v, ok := hexRune(name, 2, len(name)-2)
		if !ok {
			return ""
		}
		r = v
	} else {
		for _, c := range name[1:] {
			if c < '0' || c > '9' || r > utf8.MaxRune {
				return ""
			}
			r = r*10 + c - '0'
		}
	}
	if !utf8.ValidRune(r) {
		return ""
	}
	return string(r)
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func hexByte(text string, i int) (byte, bool) {
	r, ok := hexRune(text, i, 2)
	return byte(r), ok
}

func hexRune(text string, i, n int) (rune, bool) {
	if i+n > len(text) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(text[i : i+n]) {
		if !isHex(c) {
			return 0, false
		}
		r <<= 4
		switch {
		case c <= '9':
			r |= rune(c - '0')
		case c >= 'a':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r, true
}

// encoded finds the base64 and hex forms. They are searched in a view of
// the text without line breaks (raw, or JSON's \n) and with the escapes a
// base64 string picks up inside JSON or a URL (\/, %2B, %2F, %3D)
// decoded, so a wrapped or escaped base64 string still matches.
func (s *Secrets) encoded(text string) [][2]int {
	if len(s.literal) == 0 {
		return nil
	}
	view, from, to := unwrap(text)
	lower := asciiLower(view)
	var spans [][2]int
	for _, l := range s.literal {
		hay := view
		if l.hex {
			hay = lower
		}
		for off := 0; ; {
			k := strings.Index(hay[off:], l.s)
			if k < 0 {
				break
			}
			start, end := off+k, off+k+len(l.s)
			off = end
			alpha := isBase64
			if l.url {
				alpha = isBase64URL
			}
			if l.lead && start > 0 && alpha(view[start-1]) {
				start--
			}
			if l.trail && end < len(view) && alpha(view[end]) {
				end++
			}
			spans = append(spans, [2]int{from(start), to(end)})
		}
	}
	return spans
}

// unwrap is text without line breaks and base64's escapes, and functions
// mapping a span's start and end in it back to the text.
func unwrap(text string) (view string, from, to func(int) int) {
	if !strings.ContainsAny(text, "\r\n\\%") {
		same := func(i int) int { return i }
		return text, same, same
	}
	var b strings.Builder
	at := make([]int32, 0, len(text)+1) // at[i]: where view byte i starts in text
	for i := 0; i < len(text); {
		c, n := text[i], 1
		switch {
		case c == '\r' || c == '\n':
			i++
			continue
		case c == '\\' && i+1 < len(text) && (text[i+1] == 'n' || text[i+1] == 'r'):
			i += 2
			continue
		case c == '\\' && i+1 < len(text) && text[i+1] == '/':
			n = 2
			c = '/'
		case c == '%':
			if v, ok := hexByte(text, i+1); ok && (v == '+' || v == '/' || v == '=') {
				n, c = 3, v
			}
		}
		b.WriteByte(c)
		at = append(at, int32(i))
		i += n
	}
	at = append(at, int32(len(text)))
	from = func(i int) int { return int(at[i]) }
	// A span ends where the source of its last byte ends, not where the
	// next kept byte starts (line breaks between stay).
	to = func(i int) int {
		if i == 0 {
			return int(at[0])
		}
		last := int(at[i-1])
		if text[last] == '\\' && last+1 < len(text) && text[last+1] == '/' {
			return last + 2
		}
		if v, ok := hexByte(text, last+1); text[last] == '%' && ok && (v == '+' || v == '/' || v == '=') {
			return last + 3
		}
		return last + 1
	}
	return b.String(), from, to
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/'
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
