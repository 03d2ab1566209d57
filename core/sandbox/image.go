package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/seccomp"
)

// confine finishes a checked spec against the host and the engine, and
// audits a refusal: the seccomp profile file must hold MCP-Forge's profile
// byte for byte, and the image name is resolved through the runtime to the
// image ID the container will be created from, after checking that the
// resolved image is the one the allowlist approved. Refusals are
// *policy.Violation (rule "seccomp" or "image-not-allowed").
func (m *Manager) confine(ctx context.Context, spec *runtime.Spec) error {
	err := m.resolve(ctx, spec)
	switch {
	case err == nil:
	case errors.As(err, new(*policy.Violation)):
		m.violation("container.create", spec.Plugin, spec.SessionID, err)
	default:
		m.audit.Record(audit.Entry{Event: audit.ContainerCreate, Severity: audit.Error, SessionID: spec.SessionID,
			Error: err.Error(), Details: map[string]any{"image": spec.Image, "plugin": spec.Plugin}})
	}
	return err
}

func (m *Manager) resolve(ctx context.Context, spec *runtime.Spec) error {
	if err := seccomp.Verify(spec.SeccompProfile); err != nil {
		return &policy.Violation{Rule: "seccomp", Detail: err.Error()}
	}
	img, ok, err := m.rt.Image(ctx, spec.Image)
	if err != nil {
		return fmt.Errorf("resolve image %s: %w", spec.Image, err)
	}
	if !ok {
		return fmt.Errorf("image %s is not present (build the sandbox images with `make images`)", spec.Image)
	}
	if err := m.pol.CheckResolvedImage(spec.Image, img.ID, img.Names, img.Digests); err != nil {
		return err
	}
	spec.ImageID = img.ID
	return nil
}
