package config

import (
	"fmt"
	"strconv"
	"strings"

	units "github.com/docker/go-units"
)

// Size is a number of bytes. The configuration writes it as "512m", "2g" or
// "1024k" (binary multiples, case-insensitive; see parseSize); it is parsed
// once, when the configuration is loaded, and every user reads the bytes.
// The empty string is the zero Size: Validate refuses it where a field needs
// a size, and a field that may be unset (environment_builder.storage.max_size)
// reads 0 as "no bound".
type Size int64

// String renders the size as the configuration writes it ("512m"), exactly:
// a size that is no whole number of kibibytes is plain bytes ("1000").
func (s Size) String() string {
	switch {
	case s == 0:
		return ""
	case s > 0 && s%(1<<10) == 0:
		return FormatSize(int64(s))
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText writes String, so that `config print` shows sizes as they are
// written in forge.toml (and JSON shows them as strings).
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a size as the configuration writes it; "" is 0.
// Errors quote the value and say the accepted form.
func (s *Size) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = 0
		return nil
	}
	n, err := parseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// maxSize is the largest size accepted: a petabyte, far beyond any limit,
// and far from int64's overflow.
const maxSize = 1 << 50

// parseSize reads a size string ("512m", "2g", "1.5g", "1024k"; binary
// multiples, case-insensitive) into bytes. Zero, negative and malformed
// values are errors quoting the value. It is unexported: configuration sizes
// are parsed once, into Size fields, and requests parse through
// Size.UnmarshalText.
func parseSize(s string) (int64, error) {
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
	case n > maxSize:
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n, nil
}

// check is what Validate asks of a size a field needs: what parseSize
// refuses, said of a Size already parsed (or set in code).
func (s Size) check() error {
	switch {
	case s == 0:
		return fmt.Errorf("size \"\" is empty: use a number with k, m or g, like \"512m\"")
	case s < 0:
		return fmt.Errorf("size %q must be greater than zero", s.String())
	case s > maxSize:
		return fmt.Errorf("size %q is too large", s.String())
	}
	return nil
}

// FormatSize renders bytes in the notation the configuration uses ("512m"),
// so that a message quotes a limit the way the operator wrote it; go-units
// only renders "512MiB", which parseSize reads but operators do not write.
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
