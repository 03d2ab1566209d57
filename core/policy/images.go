package policy

import (
	"fmt"
	"path"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// imageAllowed reports whether image matches one of the glob patterns.
func imageAllowed(patterns []string, image string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, image); ok {
			return true
		}
	}
	return false
}

// CheckConfig applies the image rules to the configured images, so that
// `config check` reports a default image the allowlist would refuse.
func CheckConfig(c config.Config) config.Errors {
	var errs config.Errors
	if len(c.Images.Allowed) == 0 {
		return nil // config.Validate reports the empty list
	}
	for _, f := range []struct{ path, image string }{{"images.python", c.Images.Python}, {"images.r", c.Images.R}} {
		if f.image != "" && !imageAllowed(c.Images.Allowed, f.image) {
			errs = append(errs, config.FieldError{Path: f.path, Msg: fmt.Sprintf("%q is not matched by images.allowed %v; add it there", f.image, c.Images.Allowed)})
		}
	}
	return errs
}
