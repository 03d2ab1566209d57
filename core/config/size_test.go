package config

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		err  string // substring of the error; "" for none
	}{
		{"512m", 536870912, ""}, {"2g", 2147483648, ""}, {"1024k", 1048576, ""},
		{"2G", 2147483648, ""}, {"100", 100, ""}, {" 1K ", 1024, ""}, {"1.5g", 1610612736, ""},
		{"0m", 0, "must be greater than zero"}, {"-1g", 0, "must be greater than zero"},
		{"", 0, `is empty: use a number with k, m or g, like "512m"`}, {"m", 0, "is not a number with k, m or g"},
		{"12x", 0, "is not a number with k, m or g"}, {"99999999999999999g", 0, "is too large"},
	}
	for _, c := range cases {
		got, err := parseSize(c.in)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
			if !strings.Contains(gotErr, `"`+c.in+`"`) {
				t.Errorf("parseSize(%q): error %q does not quote the value", c.in, err)
			}
		}
		if got != c.want || (c.err == "") != (err == nil) || !strings.Contains(gotErr, c.err) {
			t.Errorf("parseSize(%q) = %d, %v; want %d, an error with %q", c.in, got, err, c.want, c.err)
		}
	}
	if FormatSize(2<<30) != "2g" || FormatSize(512<<20) != "512m" || FormatSize(3) != "3B" {
		t.Error("FormatSize")
	}
}

// A Size is written as the configuration writes it and read back exactly.
func TestSizeText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		size Size
		text string
	}{
		{0, ""}, {1, "1"}, {1000, "1000"}, {1 << 10, "1k"}, {1536, "1536"}, {3 << 10, "3k"},
		{256 << 10, "256k"}, {1 << 20, "1m"}, {1536 << 20, "1536m"}, {2 << 30, "2g"}, {20 << 30, "20g"},
	} {
		if got := c.size.String(); got != c.text {
			t.Errorf("Size(%d).String() = %q, want %q", int64(c.size), got, c.text)
		}
		var back Size
		if err := back.UnmarshalText([]byte(c.text)); err != nil || back != c.size {
			t.Errorf("UnmarshalText(%q) = %d, %v; want %d", c.text, int64(back), err, int64(c.size))
		}
	}
}

// Size is a TOML string both ways, so that a Config decodes and encodes
// with the toml package directly too.
func TestSizeTOML(t *testing.T) {
	t.Parallel()
	type doc struct {
		A Size `toml:"a"`
		B Size `toml:"b"`
	}
	var d doc
	if _, err := toml.Decode("a = \"512m\"\nb = \"1.5k\"\n", &d); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(doc{512 << 20, 1536}, d); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	var out strings.Builder
	if err := toml.NewEncoder(&out).Encode(d); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("a = \"512m\"\nb = \"1536\"\n", out.String()); diff != "" {
		t.Errorf("encoded (-want +got):\n%s", diff)
	}
	if _, err := toml.Decode(`a = "lots"`, &d); err == nil || !strings.Contains(err.Error(), `size "lots" is not a number with k, m or g`) {
		t.Errorf("a malformed size decodes: %v", err)
	}
}
