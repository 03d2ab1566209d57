package engine

import (
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
)

// A background job in a session (core/engine/background) holds the
// session: other calls in it are refused (rule session-job) until the job
// ends, rather than waiting behind it for up to hours.

// RuleSessionJob refuses a call in a session a background job holds.
const RuleSessionJob = "session-job"

// Jobs is what the engine's session paths need of the background jobs.
type Jobs interface {
	// CancelFor cancels job id, which holds session s, with why: the
	// session is going.
	CancelFor(s *session.Session, id, why string)
	// Stop ends every job (the server shuts down).
	Stop()
	// Sweep forgets the finished jobs kept past jobs.result_ttl.
	Sweep() int
}

// SetJobs lets sessions be held by the background jobs j.
func (e *Engine) SetJobs(j Jobs) { e.jobs = j }

// Hold makes p's session, if it has one, held by job: refused (audited)
// when another job took it since Prepare, p's session then dropped.
func (e *Engine) Hold(p *Prepared, job string) error {
	if p.s == nil {
		return nil
	}
	var holder string
	e.sessions.Update(p.s, func(s *session.Session) {
		if holder = s.Job; holder == "" {
			s.Job = job
		}
	})
	if holder != "" {
		e.Drop(p)
		return e.Refuse(p.req.Client, p.req.SessionID, p.tool, e.checkSessionJob(p.s), nil)
	}
	return nil
}

// Release frees p's session of job.
func (e *Engine) Release(p *Prepared, job string) {
	if p.s == nil {
		return
	}
	e.sessions.Update(p.s, func(s *session.Session) {
		if s.Job == job {
			s.Job = ""
		}
	})
}

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

// cancelSessionJob cancels the job holding s, if any, with why: the
// session is going (destroy_session), and the job ends cancelled saying so.
func (e *Engine) cancelSessionJob(s *session.Session, why string) {
	if id := e.sessions.View(s).Job; id != "" && e.jobs != nil {
		e.jobs.CancelFor(s, id, why)
	}
}

// stopJobs ends every job at shutdown, and the sessions they hold become
// free.
func (e *Engine) stopJobs() {
	if e.jobs != nil {
		e.jobs.Stop()
	}
	for _, s := range e.sessions.All() {
		e.sessions.Update(s, func(s *session.Session) { s.Job = "" })
	}
}
