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

// volumes.url_cache_size: "" is no cache; otherwise it holds at least one file.
func TestURLCacheSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		size, want string
	}{
		{"", ""},
		{"1g", ""},
		{"10m", ""},
		{"1m", "volumes.url_cache_size: must be >= volumes.max_file_size (10m), got 1m"},
		{"0", `volumes.url_cache_size: size "0" must be greater than zero`},
		{"lots", `volumes.url_cache_size: size "lots"`},
	} {
		cfg, err := LoadWith("", envOf(map[string]string{"FORGE_VOLUMES_URL_CACHE_SIZE": c.size}))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("url_cache_size %q: %q, want an error with %q", c.size, got, c.want)
		}
		if c.size == "" && err == nil && cfg.Volumes.URLCacheSize != 0 {
			t.Errorf(`url_cache_size "": %d, want 0 (no cache)`, cfg.Volumes.URLCacheSize)
		}
	}
}
