package runtime

import "testing"

func TestVersionBelow(t *testing.T) {
	cases := []struct {
		v, min string
		want   bool
	}{
		{"4.3.1", "4.4", true}, {"4.4.0", "4.4", false}, {"4.4.0-dev", "4.4", false},
		{"5.0", "4.3.0", false}, {"4.3", "4.3.0", false}, {"3.9.9", "4.3.0", true},
		{"garbage", "4.3.0", true}, {"v4.9.1", "4.4", false},
	}
	for _, c := range cases {
		if got := VersionBelow(c.v, c.min); got != c.want {
			t.Errorf("VersionBelow(%q, %q) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
}
