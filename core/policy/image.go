package policy

import "github.com/mcp-forge/mcp-forge/core/imageref"

// CheckResolvedImage refuses a container whose image, as the engine resolved
// it, is not the image the allowlist approved: a short name that Podman
// resolved to another registry's image or to an image ID, or a digest that
// belongs to an image of another repository. names and digests are the
// resolved image's repository tags and manifest digests.
func (p *Policy) CheckResolvedImage(image, id string, names, digests []string) error {
	ref, err := imageref.Check(p.s.AllowedImages, image)
	if err != nil {
		return violation("image-not-allowed", "%v; images.allowed is %v", err, p.s.AllowedImages)
	}
	if err := imageref.CheckResolved(ref, names, digests); err != nil {
		return violation("image-not-allowed", "%v (image ID %s); it is not the image images.allowed approved", err, shortID(id))
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
