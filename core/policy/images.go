package policy

import (
	"fmt"
	"maps"
	"path"
	"slices"

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

// CheckConfig applies the image rules to the images plugins are configured
// with ([plugins.NAME.config] image), so that `config check` reports one the
// allowlist would refuse. (An image a plugin declares is checked when the
// plugin is loaded.)
func CheckConfig(c config.Config) config.Errors {
	var errs config.Errors
	if len(c.Images.Allowed) == 0 {
		return nil // config.Validate reports the empty list
	}
	for _, name := range slices.Sorted(maps.Keys(c.Plugins)) {
		if image, _ := c.Plugins[name].Config["image"].(string); image != "" && !imageAllowed(c.Images.Allowed, image) {
			errs = append(errs, config.FieldError{Path: "plugins." + name + ".config.image", Msg: fmt.Sprintf("%q is not matched by images.allowed %v; add it there", image, c.Images.Allowed)})
		}
	}
	return errs
}
