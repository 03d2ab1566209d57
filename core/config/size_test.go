package config

import "testing"

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"512m", 536870912, false}, {"2g", 2147483648, false}, {"1024k", 1048576, false},
		{"2G", 2147483648, false}, {"100", 100, false}, {" 1K ", 1024, false},
		{"0m", 0, true}, {"-1g", 0, true}, {"", 0, true}, {"m", 0, true}, {"1.5g", 1610612736, false},
		{"12x", 0, true}, {"99999999999999999g", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v", c.in, got, err)
		}
		if err != nil && !containsStr(err.Error(), c.in) {
			t.Errorf("error %q does not quote the value", err)
		}
	}
	if FormatSize(2<<30) != "2g" || FormatSize(512<<20) != "512m" || FormatSize(3) != "3B" {
		t.Error("FormatSize")
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
