package engine

import (
	"errors"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/policy"
)

// refuseImage audits a custom_image the policy refused, with the rule's
// name, and returns the bad request the caller sees. The image is recorded
// as requested: nothing was resolved or run.
func (e *Engine) refuseImage(req Request, err error) error {
	rule, detail := "image-not-allowed", err.Error()
	var v *policy.Violation
	if errors.As(err, &v) {
		rule, detail = v.Rule, v.Detail
	}
	e.rec.Record(audit.Entry{Event: audit.SecurityViolation, Severity: audit.Critical, SessionID: req.SessionID, UserID: req.Client,
		Error: err.Error(), Details: map[string]any{"operation": "execute", "rule": rule, "image": req.CustomImage, "language": req.Language}})
	return badRequest("custom_image is not allowed: %s", detail)
}
