// Package cancelled ends a run whose call was cancelled (MCP
// notifications/cancelled, or a client gone) as a timeout ends it: a
// session's code interrupted, its kernel stopped only when it ignores the
// interrupt; every cancellation audited with how far the run had got and
// how it ended.
package cancelled

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// Event is the audit event of a run whose client cancelled the
// call (MCP notifications/cancelled) or went away while the code ran.
const Event = "execution.cancelled"

// ErrorName is the error name of a session run its client cancelled.
const ErrorName = "Cancelled"

// Grace is how long a cancelled session run may take to stop after
// its interrupt before the kernel is stopped under it: the grace the
// kernel backends give an interrupt at a timeout.
var Grace = 10 * time.Second

// Runs are runs cancelled, audited to rec.
type Runs struct {
	rec audit.Recorder
	log hclog.Logger
}

// New audits cancelled runs to rec.
func New(rec audit.Recorder, log hclog.Logger) Runs { return Runs{rec: rec, log: log} }

// InSession runs breq in s's kernel (caller holds s's lock). The call's
// cancellation does not reach the backend as a cancelled context, which
// would make it return at once with the code maybe still running; it is
// handled as a timeout is: the backend's Interrupt stops the code, the
// kernel's own answer ends the run, so variables set before survive and
// the next call finds the session idle. A kernel that does not stop within
// Grace is closed and the session is dead, as after a timeout whose
// interrupt was ignored. Every cancellation is audited (Event).
func (r Runs) InSession(ctx context.Context, sb backend.SessionBackend, s *session.Session, breq backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	if err := ctx.Err(); err != nil {
		// Cancelled while it waited for the session: nothing ran.
		r.Audit(s.Client, s.Internal, s.ID, breq.RunID, s.Backend, Cause(ctx), "not started", 0)
		return backend.ExecuteResult{}, err
	}
	run, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	type answer struct {
		res backend.ExecuteResult
		err error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		res, err := sb.ExecuteInSession(run, breq, emit)
		done <- answer{res, err}
	}()
	var a answer
	select {
	case a = <-done:
		return a.res, a.err
	case <-ctx.Done():
	}
	at := time.Since(start)
	cause := Cause(ctx)
	if err := sb.Interrupt(run, s.Internal); err != nil {
		r.log.Warn("could not interrupt a cancelled run", "session", s.Internal, "run_id", breq.RunID, "error", err)
	}
	outcome := "interrupted"
	select {
	case a = <-done:
		if a.err == nil && a.res.Success {
			outcome = "finished" // the code ended before the interrupt reached it
			break
		}
		if a.err == nil && !a.res.SessionDead {
			a.res.Error = &backend.ExecError{Name: ErrorName, Message: fmt.Sprintf(
				"%s after %.1f s: the code was interrupted; the session's state is kept (variables set before the interrupt remain)", cause, at.Seconds())}
			a.res.Success = false
			failedExit(&a.res)
		}
	case <-time.After(Grace):
		outcome = "kernel stopped"
		if err := sb.CloseSession(run, s.Internal); err != nil {
			r.log.Warn("could not stop a kernel that ignored the interrupt of a cancelled run", "session", s.Internal, "error", err)
		}
		stop()
		a = <-done
		msg := fmt.Sprintf("%s after %.1f s and the code did not stop within %s of an interrupt: the kernel was stopped and the session's state is lost", cause, at.Seconds(), Grace)
		a.res, a.err = backend.ExecuteResult{SessionDead: true, Error: &backend.ExecError{Name: ErrorName, Message: msg}, Stdout: a.res.Stdout, Stderr: a.res.Stderr,
			StdoutBytes: a.res.StdoutBytes, StderrBytes: a.res.StderrBytes, Duration: time.Since(start)}, nil
		failedExit(&a.res)
	}
	r.Audit(s.Client, s.Internal, s.ID, breq.RunID, s.Backend, cause, outcome, at)
	return a.res, a.err
}

// failedExit gives a failed result a non-zero exit code, as every backend
// does, so that a client reading exit_code alone sees the failure.
func failedExit(res *backend.ExecuteResult) {
	if res.Error != nil && res.ExitCode == 0 {
		res.ExitCode = 1
	}
}

// Cause says why a call's context ended, for the user and the log.
func Cause(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
		return c.Error() // a job's: cancel_job, the server's shutdown
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "the call's deadline passed"
	}
	return "the client cancelled the call"
}

// Audit records a cancelled run: who, which run, how far it had
// got and how it ended (interrupted, finished, kernel stopped, stopped, not
// started).
func (r Runs) Audit(client, internal, sessionID, runID, backendName, cause, outcome string, at time.Duration) {
	d := map[string]any{"run_id": runID, "backend": backendName, "reason": "cancelled", "cause": cause, "outcome": outcome, "after_ms": at.Milliseconds()}
	if sessionID != "" {
		d["session"] = sessionID
	}
	r.rec.Record(audit.Entry{Event: Event, Severity: audit.Info, SessionID: internal, UserID: client, Success: true, Details: d})
}
