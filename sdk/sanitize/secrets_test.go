package sanitize

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// secret has what encoders treat specially: non-ASCII in and beyond the
// BMP, a space, "/", "+", a quote, "&" and "=".
const secret = `Sëcr3t/Tök+en "x" 😀&v=1`

// asciiEscape writes every non-ASCII rune as \uXXXX (surrogate pairs beyond
// the BMP), as Python's json.dumps does; format is the hex format.
func asciiEscape(s, format string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u`+format+`\u`+format, r1, r2)
		default:
			fmt.Fprintf(&b, `\u`+format, r)
		}
	}
	return b.String()
}

func jsonInner(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// pythonASCII is Python's ascii() of a str, without the quotes.
func pythonASCII(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\'' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x80:
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

func percentAll(s, format string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&b, "%%"+format, c)
	}
	return b.String()
}

// lowerPercent writes the hex digits of percent escapes in lower case.
func lowerPercent(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			copy(b[i+1:i+3], strings.ToLower(string(b[i+1:i+3])))
		}
	}
	return string(b)
}

// mixedCase alternates the case of the hex digits of \u escapes.
func mixedCase(s string) string {
	b := []byte(s)
	up := false
	for i := 0; i+5 < len(b); i++ {
		if b[i] == '\\' && b[i+1] == 'u' {
			for k := i + 2; k < i+6; k++ {
				if up {
					b[k] = strings.ToUpper(string(b[k]))[0]
				}
			}
			up = !up
		}
	}
	return string(b)
}

// Every escaping a tool is likely to print a secret in is redacted, in
// any mix, with the text around it kept.
func TestSecretsEscaped(t *testing.T) {
	ascii := asciiEscape(jsonInner(secret), "%04x")
	s := NewSecrets([]string{secret}, 8)
	for _, tc := range []struct{ name, enc string }{
		{"raw", secret},
		{"JSON", jsonInner(secret)},
		{"JSON, non-ASCII escaped", ascii},
		{"JSON, upper-case hex", asciiEscape(jsonInner(secret), "%04X")},
		{"JSON, mixed-case hex", mixedCase(ascii)},
		{"JSON, escaped slash", strings.ReplaceAll(ascii, "/", `\/`)},
		{"JSON in JSON", jsonInner(ascii)},
		{"JSON in JSON in JSON", jsonInner(jsonInner(ascii))},
		{"Go quoted", strconv.Quote(secret)},
		{"Go quoted ASCII", strconv.QuoteToASCII(secret)},
		{"Python ascii()", pythonASCII(secret)},
		{"URL query", url.QueryEscape(secret)},
		{"URL path", url.PathEscape(secret)},
		{"URL, lower-case hex", lowerPercent(url.QueryEscape(secret))},
		{"URL, every byte", percentAll(secret, "%02X")},
		{"URL, every byte lower", percentAll(secret, "%02x")},
		{"URL of the JSON", url.QueryEscape(ascii)},
		{"HTML", html.EscapeString(secret)},
		{"HTML numeric", strings.ReplaceAll(html.EscapeString(secret), "&#34;", "&#x22;")},
		{"HTML in Go's JSON", jsonInner(html.EscapeString(secret))},
		{"HTML URL-encoded", url.QueryEscape(html.EscapeString(secret))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := `{"before": 1} ` + tc.enc + ` and after`
			out := s.String(in)
			if strings.Contains(out, tc.enc) || strings.Contains(out, "Tök") || strings.Contains(out, "cr3t") || !strings.Contains(out, Redacted) {
				t.Fatalf("%q\n-> %q", in, out)
			}
			if !strings.HasPrefix(out, `{"before": 1} `) || !strings.HasSuffix(out, " and after") {
				t.Fatalf("the text around it changed: %q", out)
			}
		})
	}
}

// base64 and hex of a secret anywhere inside a longer encoded string leave
// no character that holds a bit of the secret: what is left of the string
// is only characters made of the bytes before and after it.
func TestSecretsEncoded(t *testing.T) {
	s := NewSecrets([]string{secret}, 8)
	type encoding struct {
		name string
		enc  func([]byte) string
		bits int // per character
	}
	encodings := []encoding{
		{"std", base64.StdEncoding.EncodeToString, 6},
		{"std raw", base64.RawStdEncoding.EncodeToString, 6},
		{"URL", base64.URLEncoding.EncodeToString, 6},
		{"URL raw", base64.RawURLEncoding.EncodeToString, 6},
		{"MIME lines", func(b []byte) string { // Python's base64.encodebytes
			e := base64.StdEncoding.EncodeToString(b)
			var out []string
			for len(e) > 76 {
				out, e = append(out, e[:76]), e[76:]
			}
			return strings.Join(append(out, e), "\n")
		}, 6},
		{"MIME lines in JSON", func(b []byte) string {
			e := base64.StdEncoding.EncodeToString(b)
			return e[:len(e)/2] + `\n` + e[len(e)/2:]
		}, 6},
		{"std in JSON with escaped slashes", func(b []byte) string {
			return strings.ReplaceAll(base64.StdEncoding.EncodeToString(b), "/", `\/`)
		}, 6},
		{"std in a URL", func(b []byte) string { return url.QueryEscape(base64.StdEncoding.EncodeToString(b)) }, 6},
		{"hex", hex.EncodeToString, 4},
		{"HEX", func(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) }, 4},
	}
	for _, e := range encodings {
		for _, plain := range []struct{ name, v string }{{"raw", secret}, {"JSON", asciiEscape(jsonInner(secret), "%04x")}} {
			for _, pre := range []int{0, 1, 2, 3, 4, 5, 55} {
				for _, post := range []int{0, 1, 2} {
					name := fmt.Sprintf("%s/%s/%d+%d", e.name, plain.name, pre, post)
					t.Run(name, func(t *testing.T) {
						data := strings.Repeat("p", pre) + plain.v + strings.Repeat("q", post)
						enc := e.enc([]byte(data))
						out := s.String("<" + enc + ">")
						if !strings.Contains(out, Redacted) {
							t.Fatalf("%q\n-> %q", enc, out)
						}
						// Characters wholly from the bytes before and after.
						left := strings.NewReplacer(Redacted, "", "<", "", ">", "", "\n", "", `\n`, "", `\/`, "", "%2F", "", "%2B", "", "%3D", "", "=", "").Replace(out)
						free := 0 // characters none of whose bits are the secret's
						for i := 0; i*e.bits < 8*len(data); i++ {
							if lo, hi := i*e.bits, (i+1)*e.bits; hi <= 8*pre || lo >= 8*(pre+len(plain.v)) {
								free++
							}
						}
						if len(left) > free {
							t.Fatalf("%d characters left, at most %d carry no secret bit: %q -> %q", len(left), free, enc, out)
						}
					})
				}
			}
		}
	}
}

// Text without a secret is left alone, however many escape characters
// it holds, and quickly.
func TestSecretsLeaveOtherText(t *testing.T) {
	s := NewSecrets([]string{secret, `back\slash\\value`, "short"}, 8)
	for _, in := range []string{
		"",
		"nothing to see",
		`Sëcr3t/Tök+en "y" and %53%C3%AB but not all`,
		strings.Repeat(`\\`, 5000) + strings.Repeat("%2", 5000) + strings.Repeat("&#", 5000),
		"short stays: short",
		base64.StdEncoding.EncodeToString([]byte("an ordinary value of some length")),
	} {
		if out := s.String(in); out != in {
			t.Errorf("%.80q changed to %.80q", in, out)
		}
	}
	// Many backslashes around a secret with backslashes: no exponential search.
	start := time.Now()
	in := strings.Repeat(`\`, 200000) + "back"
	if out := s.String(in); out != in || time.Since(start) > 5*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
	if out := s.String(`x back\\\\slash\\\\\\\\value y`); out != "x "+Redacted+" y" {
		t.Fatalf("nested escaped backslashes: %q", out)
	}
}

// JSON stays valid JSON without the secret, even when the secret is a
// number or a key.
func TestSecretsJSON(t *testing.T) {
	s := NewSecrets([]string{"12345678901", "key-secret-value", secret}, 8)
	for _, in := range []string{
		`{"n": 12345678901, "s": "ok"}`,
		`{"key-secret-value": [1, 2.5, "x"]}`,
		`{"env": "` + asciiEscape(jsonInner(secret), "%04x") + `"}`,
		`[12345678901.5, "prefix key-secret-value suffix"]`,
		`{"html": "` + jsonInner(html.EscapeString(secret)) + `"}`,
	} {
		out := s.JSON([]byte(in))
		if !json.Valid(out) || strings.Contains(string(out), "12345678901") || strings.Contains(string(out), "key-secret") || strings.Contains(string(out), "Tök") || strings.Contains(string(out), `00f6`) {
			t.Errorf("%s\n-> %s", in, out)
		}
	}
	if out := s.JSON([]byte(`{"a": 12345678900}`)); string(out) != `{"a": 12345678900}` {
		t.Errorf("clean JSON changed: %s", out)
	}
}
