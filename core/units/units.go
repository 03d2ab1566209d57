// Package units parses the size strings used throughout the configuration
// and resource requests ("512m", "2g", "1024k").
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize turns "<n>[k|m|g]" (case-insensitive, binary multiples) or a
// plain byte count into bytes. Zero, negative and malformed values are errors
// that quote the value.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "" {
		return 0, fmt.Errorf("size %q is empty: use a number with k, m or g, like \"512m\"", s)
	}
	mult := int64(1)
	switch t[len(t)-1] {
	case 'k':
		mult = 1 << 10
	case 'm':
		mult = 1 << 20
	case 'g':
		mult = 1 << 30
	}
	num := t
	if mult != 1 {
		num = t[:len(t)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is not a number with k, m or g, like \"512m\"", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("size %q must be greater than zero", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize renders bytes the way ParseSize reads them, for messages.
func FormatSize(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dg", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dm", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dk", b>>10)
	}
	return fmt.Sprintf("%d bytes", b)
}
