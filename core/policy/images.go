package policy

import (
	"fmt"
	"maps"
	"slices"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/imageref"
)

// CheckConfig applies the image rules to the configuration: every
// images.allowed entry must be a valid pattern, and the images plugins are
// configured with ([plugins.NAME.config] image) must be admitted, so that
// `config check` reports what the policy would refuse at run time. (An image
// a plugin declares is checked when the plugin is loaded; config cannot do
// this itself: it imports nothing of the core.)
func CheckConfig(c config.Config) config.Errors {
	errs := checkWaive(c.Security.Waive)
	for i, p := range c.Images.Allowed {
		if _, err := imageref.ParsePattern(p); err != nil {
			errs = append(errs, config.FieldError{Path: fmt.Sprintf("images.allowed[%d]", i), Msg: fmt.Sprintf("%q: %v", p, err)})
		}
	}
	if len(c.Images.Allowed) == 0 || len(errs) > 0 {
		return errs // config.Validate reports the empty list
	}
	for _, name := range slices.Sorted(maps.Keys(c.Plugins)) {
		if image, _ := c.Plugins[name].Config["image"].(string); image != "" && !imageref.Allowed(c.Images.Allowed, image) {
			errs = append(errs, config.FieldError{Path: "plugins." + name + ".config.image", Msg: fmt.Sprintf("%q is not matched by images.allowed %v; add it there", image, c.Images.Allowed)})
		}
	}
	return errs
}
