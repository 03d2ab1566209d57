package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestScrubber(t *testing.T) {
	env := map[string]string{"MYVARIABLE": "PLANTEDSECRET\x00tail-part", "SHORT": "1", "HOME": "/tmp", "TOKEN_NAME_X": "quote\"d\\value"}
	cases := []struct {
		name, in string
		names    bool
		absent   []string
		present  []string
	}{
		{"runc NUL error", `runc create failed: environment variable value can't contain null(\x00): "MYVARIABLE=PLANTEDSECRET\x00tail-part": OCI runtime error`, false,
			[]string{"PLANTEDSECRET", "tail-part"}, []string{"MYVARIABLE=" + Redacted, "OCI runtime error"}},
		{"raw value", "value PLANTEDSECRET\x00tail-part here", false, []string{"PLANTEDSECRET"}, []string{"value " + Redacted + " here"}},
		{"JSON form", `{"MYVAR":"PLANTEDSECRET\u0000tail-part"}`, false, []string{"PLANTEDSECRET", "tail-part"}, nil},
		{"quoted value", `x="quote\"d\\value"`, false, []string{`quote\"d`, "value"}, nil},
		{"short values stay", "exit code 1 in /tmp/x", true, nil, []string{"exit code 1 in /tmp/x"}},
		{"names only when asked", "MYVARIABLE TOKEN_NAME_X", false, nil, []string{"MYVARIABLE", "TOKEN_NAME_X"}},
		{"names for the audit log", "MYVARIABLE TOKEN_NAME_X", true, []string{"MYVARIABLE", "TOKEN_NAME_X"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := NewScrubber(env, c.names).String(c.in)
			for _, a := range c.absent {
				if strings.Contains(out, a) {
					t.Errorf("%q still holds %q", out, a)
				}
			}
			for _, p := range c.present {
				if !strings.Contains(out, p) {
					t.Errorf("%q lacks %q", out, p)
				}
			}
		})
	}
}

func TestScrubberErrors(t *testing.T) {
	s := NewScrubber(map[string]string{"A": "PLANTED-VALUE"}, false)
	if err := s.Error(ErrTimeout); err != ErrTimeout {
		t.Errorf("clean error changed: %v", err)
	}
	wrapped := fmt.Errorf("podman start: %w", errors.New("A=PLANTED-VALUE"))
	got := s.Error(wrapped)
	if strings.Contains(got.Error(), "PLANTED") || errors.Unwrap(got) != nil {
		t.Errorf("scrubbed error %q keeps the secret or its chain", got)
	}
	var nilScrubber *Scrubber
	if nilScrubber.Error(wrapped) != wrapped || NewScrubber(nil, true).String("x") != "x" {
		t.Error("empty scrubbers must pass text through")
	}
}
