package config

import (
	"strings"
	"testing"
)

func TestFileSizeLimits(t *testing.T) {
	for _, c := range []struct {
		max, inline, want string
	}{
		{"10m", "256k", ""},
		{"12m", "12m", ""},
		{"13m", "256k", "volumes.max_file_size"}, // would not fit one stdio frame in base64
		{"1m", "2m", "volumes.max_file_size"},
		{"lots", "256k", "volumes.max_file_size"},
	} {
		cfg := Default()
		cfg.Volumes.MaxFileSize, cfg.Volumes.InlineFileSize = c.max, c.inline
		errs := Validate(cfg)
		got := ""
		if len(errs) > 0 {
			got = errs.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("max %s inline %s: %q, want an error naming %q", c.max, c.inline, got, c.want)
		}
	}
}
