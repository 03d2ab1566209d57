package sanitize

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestUTF8(t *testing.T) {
	cases := []struct {
		in, want string
		replaced bool
	}{
		{"plain ✓", "plain ✓", false},
		{"\xff\xfe ok\n", "\uFFFD ok\n", true},
		{"a\xffb\xc3", "a\uFFFDb\uFFFD", true},
		{"\xed\xb3\xbf", "\uFFFD", true}, // an encoded surrogate (Python surrogateescape of \udcff is 0xff; this is CESU)
		{"", "", false},
	}
	for _, c := range cases {
		got, replaced := UTF8(c.in)
		if got != c.want || replaced != c.replaced || !utf8.ValidString(got) {
			t.Errorf("UTF8(%q) = %q, %v; want %q, %v", c.in, got, replaced, c.want, c.replaced)
		}
	}
}

func TestCut(t *testing.T) {
	s := "aé✓𝄞" // 1 + 2 + 3 + 4 bytes
	cases := []struct {
		n    int
		want string
	}{
		{0, ""}, {1, "a"}, {2, "a"}, {3, "aé"}, {4, "aé"}, {5, "aé"}, {6, "aé✓"}, {9, "aé✓"}, {10, s}, {99, s}, {-1, ""},
	}
	for _, c := range cases {
		if got := Cut(s, c.n); got != c.want {
			t.Errorf("Cut(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Cut("\xff\xff\xff\xff\xff", 3); got != "\xff\xff\xff" {
		t.Errorf("Cut of non-UTF-8 = %q", got)
	}
}

func TestTrimCut(t *testing.T) {
	cases := []struct{ in, want string }{
		{"ab", "ab"},
		{"a\xc3", "a"},         // é cut after its first byte
		{"a\xe2\x9c", "a"},     // ✓ cut after two bytes
		{"a\xf0\x9d\x84", "a"}, // 𝄞 cut after three bytes
		{"a✓", "a✓"},
		{"a\xff", "a\xff"}, // invalid, not cut: left for UTF8 to replace
		{"", ""},
	}
	for _, c := range cases {
		if got := TrimCut(c.in); got != c.want {
			t.Errorf("TrimCut(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// JSONLen must count exactly what encoding/json writes, or a bound on a
// message computed from it is wrong.
func TestJSONLen(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\n\r\t", "\x00\x01\x1f", "<a href='x'>&amp;</a>", "é中😀",
		"\u2028\u2029", "\xff\xfe bad", "mixed \x01\xffé<\n", strings.Repeat("\x01", 1000)} {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := JSONLen(s), len(data)-2; got != want {
			t.Errorf("JSONLen(%q) = %d, encoding/json writes %d", s, got, want)
		}
	}
}

func TestCutJSON(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"\x01\x01\x01", 13, "\x01\x01"},
		{"a\x01", 6, "a"},
		{"é中", 4, "é"},
		{"ab\n", 3, "ab"},
		{"", 0, ""},
	} {
		got := CutJSON(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("CutJSON(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		if JSONLen(got) > tc.n {
			t.Errorf("CutJSON(%q, %d) is %d bytes in JSON", tc.s, tc.n, JSONLen(got))
		}
	}
}
