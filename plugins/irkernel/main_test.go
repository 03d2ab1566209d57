package main

import "testing"

func TestErrorLine(t *testing.T) {
	cases := []struct {
		evalue string
		tb     []string
		want   int
	}{
		{"<text>:2:0: unexpected end of input", nil, 2},
		{"parse error", []string{"Error in parse(text = x): <text>:3:5: unexpected symbol"}, 3},
		{"object 'y' not found", []string{"eval(expr, envir)"}, 0},
	}
	for _, c := range cases {
		if got := errorLine("", c.evalue, c.tb); got != c.want {
			t.Errorf("errorLine(%q, %q) = %d, want %d", c.evalue, c.tb, got, c.want)
		}
	}
}
