package loader

import (
	"strings"
	"testing"
)

func TestFileSizeLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max, inline, want string
	}{
		{"10m", "256k", ""},
		{"12m", "12m", ""},
		{"13m", "256k", "volumes.max_file_size: must be at most 12m"}, // would not fit one stdio frame in base64
		{"1m", "2m", "volumes.max_file_size: must be >= volumes.inline_file_size (2m), got 1m"},
		{"lots", "256k", `volumes.max_file_size: size "lots"`},
	} {
		_, err := LoadWith("", envOf(map[string]string{"FORGE_VOLUMES_MAX_FILE_SIZE": c.max, "FORGE_VOLUMES_INLINE_FILE_SIZE": c.inline}))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("max %s inline %s: %q, want an error with %q", c.max, c.inline, got, c.want)
		}
	}
}
