package hostpattern

import "testing"

// Patterns are normalized, and String reads back as the same pattern.
func TestParse(t *testing.T) {
	cases := []struct {
		in, want string
		port     int
		wildcard bool
	}{
		{"Files.Example.ORG.", "files.example.org", 0, false},
		{"*.Example.org:443", "*.example.org:443", 443, true},
		{"203.0.113.7:8080", "203.0.113.7:8080", 8080, false},
		{"[2001:DB8::1]:443", "[2001:db8::1]:443", 443, false},
		{"2001:db8::1", "2001:db8::1", 0, false},
		{"::ffff:10.1.2.3", "10.1.2.3", 0, false},
		{"[::ffff:10.1.2.3]:80", "10.1.2.3:80", 80, false},
		{"localhost", "localhost", 0, false},
	}
	for _, tc := range cases {
		p, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if p.String() != tc.want || p.Port != tc.port || p.Wildcard() != tc.wildcard {
			t.Errorf("%q: got %q port %d wildcard %v, want %q port %d wildcard %v", tc.in, p, p.Port, p.Wildcard(), tc.want, tc.port, tc.wildcard)
		}
		back, err := Parse(p.String())
		if err != nil || back != p {
			t.Errorf("%q: %q reads back as %+v (%v)", tc.in, p, back, err)
		}
	}
}
