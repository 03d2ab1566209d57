package engine

import (
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
)

// A background job in a session (core/engine/background) holds the
// session (session.Session.Job): other calls in it are refused (rule
// session-job) until the job ends, rather than waiting behind it for up
// to hours.

// RuleSessionJob refuses a call in a session a background job holds.
const RuleSessionJob = "session-job"

// checkSessionJob refuses a call in a session a job holds.
func (e *Engine) checkSessionJob(s *session.Session) error {
	v := e.sessions.View(s)
	if v.Job == "" {
		return nil
	}
	return refusal.New(RuleSessionJob, "session %q is running background job %s: wait for it (wait_job) or stop it (cancel_job), then call again; a job holds its session until it ends",
		s.ID, v.Job)
}

// RefuseIfJob refuses tool on a session a job holds (audited), rather than
// have it wait for the session's lock for the job's whole run.
func (e *Engine) RefuseIfJob(s *session.Session, tool string) error {
	if err := e.checkSessionJob(s); err != nil {
		return e.Refuse(s.Client, s.ID, tool, err, nil)
	}
	return nil
}
