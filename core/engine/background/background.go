// Package background runs execute calls as jobs (execute_<language> with
// background: true): the run is prepared and checked by the engine as a
// call's is, then runs detached from the call that started it, bounded by
// its own timeout (up to execution.max_background_timeout), and its owner
// follows it through core/jobs. A job in a session holds the session
// (session.Session.Job): other calls in it are refused (rule session-job)
// until the job ends, rather than waiting behind it for up to hours.
package background

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/cancelled"
	"github.com/mcp-forge/mcp-forge/core/engine/limits"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/procid"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/tenant"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Audit events of jobs.
const (
	EventJobLost   = "job.lost"   // a job that was running when the server stopped, found at the next start
	EventJobCancel = "job.cancel" // cancel_job asked a job to stop
)

// errJobCancelled is the cause of a job's context when cancel_job ends
// it: the user reads it in the result ("cancel_job was called after …").
var errJobCancelled = errors.New("cancel_job was called")

// errServerStopped is the cause when the server shuts down under a job.
var errServerStopped = errors.New("the server shut down")

// maxJobResult bounds the JSON of a job's result kept in memory and on
// disk; past it the images are left out (a notice says so).
const maxJobResult = 32 << 20

// Engine is what jobs need of the engine: a request prepared and run as
// an execute call's, the session it runs in, which the job holds
// meanwhile (session.Session.Job), and refusals audited as the engine
// audits them.
type Engine interface {
	Prepare(ctx context.Context, req engine.Request) (*engine.Prepared, error)
	Run(ctx context.Context, p *engine.Prepared, emit func(backend.StreamEvent), started func(runID string)) (engine.Result, error)
	Drop(p *engine.Prepared)
	Registry() *session.Registry
	RefuseIfJob(s *session.Session, tool string) error
	Refuse(client, sessionID, tool string, err error, details map[string]any) error
}

// Runner runs the background jobs of the server's clients.
type Runner struct {
	eng      Engine
	sessions *session.Registry
	cfg      config.Config
	rec      audit.Recorder
	reg      *jobs.Registry
}

func jobsRoot(cfg config.Config) string {
	return filepath.Join(cfg.Volumes.BasePath, "state", "jobs")
}

// New loads the job records of earlier runs of the server: the jobs that
// were running when it stopped are lost, and audited as such.
func New(cfg config.Config, eng Engine, rec audit.Recorder) (*Runner, error) {
	store, err := jobs.NewStore(jobsRoot(cfg))
	if err != nil {
		return nil, fmt.Errorf("background jobs: %w (volumes.base_path must be writable by the server)", err)
	}
	reg, lost, err := jobs.New(jobs.Options{Store: store, TTL: time.Duration(cfg.Jobs.ResultTTL) * time.Second, MaxPerClient: cfg.Jobs.MaxPerClient,
		TailBytes: int(cfg.Execution.MaxOutput), Server: procid.Self()})
	if err != nil {
		return nil, fmt.Errorf("background jobs: %w", err)
	}
	for _, r := range lost {
		rec.Record(audit.Entry{Event: EventJobLost, Severity: audit.Warning, SessionID: engine.AuditID(r.Client, r.SessionID), UserID: r.Client, Success: false, Error: r.Reason,
			Details: map[string]any{"job": r.ID, "run_id": r.RunID, "language": r.Language, "session": r.SessionID, "server": string(r.Server)}})
	}
	return &Runner{eng: eng, sessions: eng.Registry(), cfg: cfg, rec: rec, reg: reg}, nil
}

// OnJobChange makes fn, beside those told before, hear of every change of
// any job (its state, its output at most once a second): resource-updated
// and task-status notifications.
func (b *Runner) OnJobChange(fn func(jobs.Record)) { b.reg.OnChange(fn) }

// CancelFor cancels the job holding s, if any, with why: the session is
// going (destroy_session), and the job ends cancelled saying so.
func (b *Runner) CancelFor(s *session.Session, why string) {
	id := b.sessions.View(s).Job
	if id == "" {
		return
	}
	if j, err := b.reg.Get(s.Client, id); err == nil {
		b.rec.Record(audit.Entry{Event: EventJobCancel, SessionID: s.Internal, UserID: s.Client, Success: true,
			Details: map[string]any{"job": id, "session": s.ID, "by": why}})
		j.Cancel(errors.New(why))
	}
}

// StartJob checks and prepares req as Execute does (a refusal is returned
// at once) and runs it in the background: the answer is the queued job.
func (b *Runner) StartJob(ctx context.Context, req engine.Request) (jobs.Record, error) {
	req.Background, req.Job = true, jobs.NewID()
	p, err := b.eng.Prepare(ctx, req)
	if err != nil {
		return jobs.Record{}, err
	}
	if s := p.Session(); s != nil {
		var holder string
		b.sessions.Update(s, func(s *session.Session) {
			if holder = s.Job; holder == "" {
				s.Job = req.Job
			}
		})
		if holder != "" { // another job took it since Prepare
			b.eng.Drop(p)
			return jobs.Record{}, b.eng.RefuseIfJob(s, p.Tool())
		}
	}
	// The job outlives the call: its context keeps the call's values (the
	// tenant's admission) but not its end.
	jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	j, err := b.reg.Add(jobs.Record{ID: req.Job, Client: req.Client, Language: req.Language, SessionID: req.SessionID, Backend: p.Backend(),
		CodeSHA256: audit.HashCode(req.Code), TimeoutS: p.Timeout()}, cancel)
	if err != nil {
		cancel(nil)
		b.release(p.Session(), req.Job)
		b.eng.Drop(p)
		return jobs.Record{}, b.eng.Refuse(req.Client, req.SessionID, p.Tool(), err, map[string]any{"job": req.Job})
	}
	// The tenant's run slot is held from now, not from when the job gets
	// a slot of the server: a queued job counts against the quota.
	hold := tenant.HoldRun(ctx)
	go func() {
		defer hold()
		emit := func(ev backend.StreamEvent) { j.Output(ev.Name == host.Stderr, ev.Text) }
		res, err := b.eng.Run(jctx, p, emit, func(runID string) { j.Start(p.Backend(), runID) })
		state, why := jobOutcome(jctx, res, err)
		b.release(p.Session(), req.Job) // free before anyone waiting hears the job ended
		j.Finish(state, why, jobResult(res, err))
	}()
	return j.Full(), nil
}

func (b *Runner) release(s *session.Session, id string) {
	if s == nil {
		return
	}
	b.sessions.Update(s, func(s *session.Session) {
		if s.Job == id {
			s.Job = ""
		}
	})
}

// jobOutcome is the state a finished run leaves its job in, and why.
func jobOutcome(ctx context.Context, res engine.Result, err error) (jobs.State, string) {
	switch {
	case res.Error != nil && res.Error.Name == cancelled.ErrorName:
		return jobs.Cancelled, res.Error.Message
	case err != nil && ctx.Err() != nil:
		return jobs.Cancelled, cancelled.Cause(ctx) + ": the run was stopped"
	case err != nil:
		return jobs.Failed, err.Error()
	case res.Success:
		return jobs.Done, ""
	case res.Error != nil:
		return jobs.Failed, res.Error.Name + ": " + res.Error.Message
	default:
		return jobs.Failed, fmt.Sprintf("the code exited with code %d", res.ExitCode)
	}
}

// jobResult is the JSON form a job keeps of its result: the result, or
// for a run that failed before its code ran, nothing (the reason says it).
func jobResult(res engine.Result, err error) json.RawMessage {
	if err != nil && res.Duration == 0 && res.Stdout == "" && res.Stderr == "" {
		return nil
	}
	data, merr := json.Marshal(res)
	if merr == nil && len(data) > maxJobResult && len(res.Images) > 0 {
		n := len(res.Images)
		for merr == nil && len(data) > maxJobResult && len(res.Images) > 0 {
			res.Images = res.Images[:len(res.Images)-1] // the last ones go first
			data, merr = json.Marshal(res)
		}
		res.Notices = append(res.Notices, fmt.Sprintf("%d of the job's %d image(s) were left out of its kept result, which holds at most %d MiB: save them as files", n-len(res.Images), n, maxJobResult>>20))
		data, merr = json.Marshal(res)
	}
	if merr != nil {
		return nil
	}
	return data
}

// JobResult decodes a finished job's result; ok is false when it has none.
func JobResult(r jobs.Record) (res engine.Result, ok bool) {
	if len(r.Result) == 0 || json.Unmarshal(r.Result, &res) != nil {
		return engine.Result{}, false
	}
	return res, true
}

// job finds client's job id, or refuses (audited) for tool.
func (b *Runner) job(client, id, tool string) (*jobs.Job, error) {
	j, err := b.reg.Get(client, id)
	if err != nil {
		return nil, b.eng.Refuse(client, "", tool, err, map[string]any{"job": refusal.Quoted(id)})
	}
	return j, nil
}

// Job returns client's job id.
func (b *Runner) Job(client, id, tool string) (jobs.Record, error) {
	j, err := b.job(client, id, tool)
	if err != nil {
		return jobs.Record{}, err
	}
	return j.Full(), nil
}

// DefaultJobWait is how long (seconds) wait_job waits when the call says
// nothing: below the usual 60 s request timeout of a client that ignores
// progress.
const DefaultJobWait = 30

// WaitJob waits up to seconds (0: DefaultJobWait) for client's job id to
// finish and returns it as it is then (finished or not).
func (b *Runner) WaitJob(ctx context.Context, client, id string, seconds int) (jobs.Record, error) {
	const tool = "wait_job"
	if seconds == 0 {
		seconds = DefaultJobWait
	}
	if max := b.cfg.Execution.MaxBackgroundTimeout; seconds < 0 || seconds > max {
		return jobs.Record{}, b.eng.Refuse(client, "", tool, refusal.New(limits.RuleTimeout, "timeout %d: wait_job waits 1-%d seconds (execution.max_background_timeout)", seconds, max), nil)
	}
	j, err := b.job(client, id, tool)
	if err != nil {
		return jobs.Record{}, err
	}
	return awaitJob(ctx, j, time.Duration(seconds)*time.Second), nil
}

// awaitJob waits up to wait for j to end, or for ctx, and returns j then.
func awaitJob(ctx context.Context, j *jobs.Job, wait time.Duration) jobs.Record {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-j.Done():
	case <-t.C:
	case <-ctx.Done():
	}
	return j.Full()
}

// Jobs lists client's jobs, newest first, without their results.
func (b *Runner) Jobs(client string) []jobs.Record { return b.reg.List(client) }

// CancelJob stops client's job id: a session's code is interrupted (its
// state kept, as at a timeout), a stateless run's sandbox removed. It
// waits for the job to end, up to the interrupt's grace and a little
// more, and returns the job as it is then.
func (b *Runner) CancelJob(ctx context.Context, client, id string) (jobs.Record, error) {
	j, err := b.job(client, id, "cancel_job")
	if err != nil {
		return jobs.Record{}, err
	}
	r := j.Record()
	if r.State.Finished() {
		return j.Full(), nil
	}
	b.rec.Record(audit.Entry{Event: EventJobCancel, SessionID: engine.AuditID(client, r.SessionID), UserID: client, Success: true,
		Details: map[string]any{"job": id, "run_id": r.RunID, "state": string(r.State), "session": r.SessionID}})
	j.Cancel(errJobCancelled)
	return awaitJob(ctx, j, cancelled.Grace+5*time.Second), nil
}

// Sweep forgets the finished jobs kept past jobs.result_ttl.
func (b *Runner) Sweep() int { return b.reg.Sweep() }

// Stop ends every job at shutdown: it is recorded lost (with why) before
// its work is cancelled, so that the record says what happened whichever
// finishes first, and the sessions it holds become free.
func (b *Runner) Stop() {
	for _, j := range b.reg.Running() {
		j.Abandon("the server shut down while the job ran, and its sandbox went with it: run the code again", errServerStopped)
	}
	for _, s := range b.sessions.All() {
		b.sessions.Update(s, func(s *session.Session) { s.Job = "" })
	}
}
