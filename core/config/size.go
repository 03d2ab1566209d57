package config

import (
	"fmt"
	"strings"

	units "github.com/docker/go-units"
)

// ParseSize reads the size strings of the configuration and of resource
// requests ("512m", "2g", "1.5g", "1024k"; binary multiples, case-insensitive)
// into bytes. Zero, negative and malformed values are errors quoting the value.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q is empty: use a number with k, m or g, like \"512m\"", s)
	}
	if strings.HasPrefix(t, "-") {
		return 0, fmt.Errorf("size %q must be greater than zero", s)
	}
	n, err := units.RAMInBytes(t)
	switch {
	case err != nil:
		return 0, fmt.Errorf("size %q is not a number with k, m or g, like \"512m\"", s)
	case n <= 0:
		// RAMInBytes wraps around on overflow.
		if strings.Trim(t, "0kKmMgGtTpPbBiI. ") == "" {
			return 0, fmt.Errorf("size %q must be greater than zero", s)
		}
		return 0, fmt.Errorf("size %q is too large", s)
	case n > 1<<50:
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n, nil
}

// FormatSize renders bytes in the notation the configuration uses ("512m"),
// so that a message quotes a limit the way the operator wrote it; go-units
// only renders "512MiB", which ParseSize reads but operators do not write.
func FormatSize(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dg", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dm", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dk", b>>10)
	}
	return units.BytesSize(float64(b))
}
