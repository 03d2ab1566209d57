// Package jobs is the background jobs toolset: wait_job, list_jobs,
// cancel_job and the job resources, which a client may subscribe to
// (execute_<language> with background: true starts a job).
package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/background"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/execution"
	"github.com/mcp-forge/mcp-forge/core/refusal"
	"github.com/mcp-forge/mcp-forge/core/toolcall"
)

// Background jobs: execute_<language> with background: true, then
// wait_job, list_jobs, cancel_job and the job resources.

// Jobs is what the job tools and resources need; LanguageName names a
// finished job's language in its summary.
type Jobs interface {
	StartJob(ctx context.Context, req engine.Request) (jobs.Record, error)
	Job(client, id, tool string) (jobs.Record, error)
	WaitJob(ctx context.Context, client, id string, seconds int) (jobs.Record, error)
	Jobs(client string) []jobs.Record
	CancelJob(ctx context.Context, client, id string) (jobs.Record, error)
	OnJobChange(fn func(jobs.Record))
	LanguageName(language string) string
}

// JobView is what tools and resources show of a job.
type JobView struct {
	ID          string    `json:"job_id"`
	State       string    `json:"state" jsonschema:"queued (waiting for a run slot), running, done, failed, cancelled or lost (the server stopped while it ran)"`
	Language    string    `json:"language,omitempty"`
	SessionID   string    `json:"session_id,omitempty" jsonschema:"the session it runs in; empty: a fresh container"`
	Backend     string    `json:"backend,omitempty"`
	Reason      string    `json:"reason,omitempty" jsonschema:"why it failed, was cancelled or was lost"`
	Created     time.Time `json:"created,omitzero"`
	Started     time.Time `json:"started,omitzero"`
	Finished    time.Time `json:"finished,omitzero"`
	Elapsed     float64   `json:"elapsed_s" jsonschema:"seconds since it started running (to its end when finished)"`
	TimeoutS    int       `json:"timeout_s,omitempty"`
	Stdout      string    `json:"stdout,omitempty" jsonschema:"the last part of its stdout so far (the result has the output as a call returns it)"`
	Stderr      string    `json:"stderr,omitempty" jsonschema:"the last part of its stderr so far"`
	StdoutBytes int64     `json:"stdout_bytes"`
	StderrBytes int64     `json:"stderr_bytes"`
	Progress    int       `json:"progress" jsonschema:"output events seen so far"`
	URI         string    `json:"uri,omitempty" jsonschema:"the job as a resource (subscribe to hear of changes)"`
}

// JobOutput is a job, with its result once it has finished, or the error.
type JobOutput struct {
	JobView
	Result *execution.Output   `json:"result,omitempty" jsonschema:"the finished job's result, as execute_<language> returns one"`
	Error  *toolsets.ErrorInfo `json:"error,omitempty" jsonschema:"why the request failed (not the job's code: see result)"`
}

// JobsOutput lists jobs.
type JobsOutput struct {
	Jobs []JobView `json:"jobs"`
}

// JobInput names a job.
type JobInput struct {
	JobID string `json:"job_id" jsonschema:"the job_id execute_<language> with background: true returned"`
}

// WaitInput is wait_job's input.
type WaitInput struct {
	JobID   string `json:"job_id" jsonschema:"the job_id execute_<language> with background: true returned"`
	Timeout int    `json:"timeout,omitempty"`
}

func jobView(r jobs.Record) JobView {
	v := JobView{ID: r.ID, State: string(r.State), Language: r.Language, SessionID: r.SessionID, Backend: r.Backend, Reason: r.Reason,
		Created: r.Created, Started: r.Started, Finished: r.Finished, TimeoutS: r.TimeoutS, Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Progress: r.Progress, URI: toolsets.JobURI(r.ID)}
	switch {
	case r.Started.IsZero():
	case r.Finished.IsZero():
		v.Elapsed = time.Since(r.Started).Seconds()
	default:
		v.Elapsed = r.Finished.Sub(r.Started).Seconds()
	}
	return v
}

type tools struct {
	env toolsets.Env
	j   Jobs
}

// Toolset is the job tools and resources; once registered, it tells
// subscribers of each change of a job.
func Toolset(env toolsets.Env, j Jobs) toolsets.Toolset {
	t := tools{env, j}
	return toolsets.Toolset{Name: "jobs",
		Tools: []toolsets.Tool{Wait(env, j), List(env, j), Cancel(env, j)},
		Templates: []toolsets.Template{{Def: &mcp.ResourceTemplate{
			Name: "job", Title: "Background job", URITemplate: toolsets.JobTemplate, MIMEType: "application/json",
			Description: "A background job: state, the last part of its output, progress and, once finished, its result (images listed by name: wait_job returns them); " +
				"subscribe (resources/subscribe) to be told of each change",
		}, Handler: t.jobResource}},
		Resources: []toolsets.Resource{{Def: &mcp.Resource{
			URI: toolsets.JobsURI, Name: "jobs", Title: "Your background jobs", MIMEType: "application/json",
			Description: "Your background jobs, newest first, as list_jobs returns them",
		}, Handler: func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return toolsets.JSON(toolsets.JobsURI, JobsOutput{Jobs: toolsets.Each(j.Jobs(env.Conn(req.Session)), jobView)})
		}}},
		Start: func(srv *mcp.Server) { notify(srv, j) },
	}
}

// notify tells srv's subscribers of each change of a job.
func notify(srv *mcp.Server, j Jobs) {
	// Told from the jobs' goroutines: one sender, so that a slow
	// subscriber holds no job up and notifications do not pile up as
	// goroutines (when it lags, updates are dropped: each says only "read
	// it again", and the next one says it too).
	updates := make(chan string, 256)
	go func() {
		for uri := range updates {
			_ = srv.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}()
	var states sync.Map // job id → its last state told
	j.OnJobChange(func(r jobs.Record) {
		uris := []string{toolsets.JobURI(r.ID)}
		if prev, loaded := states.Swap(r.ID, r.State); !loaded || prev != r.State {
			uris = append(uris, toolsets.JobsURI) // the list changes with states, not output
		}
		if r.State.Finished() {
			states.Delete(r.ID)
		}
		for _, u := range uris {
			select {
			case updates <- u:
			default:
			}
		}
	})
}

// Wait is wait_job.
func Wait(env toolsets.Env, j Jobs) toolsets.Tool {
	t := tools{env, j}
	waitIn := toolsets.Schema[WaitInput]()
	waitIn.Properties["timeout"].Description = fmt.Sprintf("seconds to wait for the job to end (default %d, at most %d); the job keeps running after it. "+
		"A client that sent a progressToken gets progress every %d s while it waits", background.DefaultJobWait, env.Cfg.Execution.MaxBackgroundTimeout, env.Cfg.Execution.ProgressInterval)
	return toolsets.New(&mcp.Tool{
		Name: "wait_job", Title: "Wait for a background job",
		Description: "Wait until a background job (execute_<language> with background: true) has finished, or until timeout, and return it: its state " +
			"(queued, running, done, failed, cancelled, lost), the last part of its output so far and, once finished, its result in the shape execute_<language> returns " +
			"(with its images as image content). The job is also readable at " + toolsets.JobTemplate + ".",
		InputSchema: waitIn,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, JobOutput, error) {
		_, stop := toolsets.Progress(ctx, req, time.Duration(env.Cfg.Execution.ProgressInterval)*time.Second)
		r, err := j.WaitJob(ctx, env.Conn(req.Session), in.JobID, in.Timeout)
		stop()
		return t.jobResult(in.JobID, r, err)
	})
}

// List is list_jobs.
func List(env toolsets.Env, j Jobs) toolsets.Tool {
	return toolsets.New(&mcp.Tool{
		Name: "list_jobs", Title: "List your background jobs",
		Description: fmt.Sprintf("Your background jobs, newest first, with their states and output sizes (wait_job or mcp://forge/jobs/{id} give a job's output); a finished job is kept for %d s (jobs.result_ttl) "+
			"after it ended, across reconnects and server restarts (a job that was running when the server stopped is listed as lost, with the reason).", env.Cfg.Jobs.ResultTTL),
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, JobsOutput, error) {
		out := JobsOutput{Jobs: toolsets.Each(j.Jobs(env.Conn(req.Session)), jobView)}
		return toolcall.Text(jobsText(out.Jobs)), out, nil
	})
}

// Cancel is cancel_job.
func Cancel(env toolsets.Env, j Jobs) toolsets.Tool {
	t := tools{env, j}
	return toolsets.New(&mcp.Tool{
		Name: "cancel_job", Title: "Cancel a background job",
		Description: "Stop a background job: code in a session is interrupted and the session's state kept (variables set before remain), as at a timeout; " +
			"a stateless job's container is removed. Waits for the job to end (a few seconds at most) and returns it, its state cancelled. A finished job is returned as it is.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in JobInput) (*mcp.CallToolResult, JobOutput, error) {
		r, err := j.CancelJob(ctx, env.Conn(req.Session), in.JobID)
		return t.jobResult(in.JobID, r, err)
	})
}

func jobsText(vs []JobView) string {
	if len(vs) == 0 {
		return "No background jobs (start one with execute_<language> and background: true)."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d job(s):", len(vs))
	for _, v := range vs {
		where := "stateless"
		if v.SessionID != "" {
			where = "session " + v.SessionID
		}
		fmt.Fprintf(&b, "\n%s  %s  %s, %s, %.1f s", v.ID, v.State, v.Language, where, v.Elapsed)
		if v.Reason != "" {
			fmt.Fprintf(&b, ": %s", v.Reason)
		}
	}
	return b.String()
}

// jobResult is a job as a tool result: a finished job's result as
// execute_<language> gives it (summary, images), else its state and the
// tail of its output.
func (t tools) jobResult(id string, r jobs.Record, err error) (*mcp.CallToolResult, JobOutput, error) {
	if err != nil {
		res, e := toolsets.Failure(err)
		return res, JobOutput{JobView: JobView{ID: id}, Error: e}, nil
	}
	out := JobOutput{JobView: jobView(r)}
	res := &mcp.CallToolResult{}
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s is %s", r.ID, r.State)
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", r.Reason)
	}
	b.WriteString(".\n")
	er, ok := background.JobResult(r)
	switch {
	case ok:
		o := execution.ToOutput(er)
		b.WriteString(execution.Summary(t.j.LanguageName(r.Language), t.env.Cfg, er, o))
		execution.Once(&o)
		out.Result = &o
		for _, im := range er.Images {
			res.Content = append(res.Content, &mcp.ImageContent{Data: im.Data, MIMEType: im.MIMEType})
		}
		out.Stdout, out.Stderr = "", "" // the result has them
		res.IsError = !er.Success && r.State != jobs.Cancelled
	case !r.State.Finished():
		fmt.Fprintf(&b, "Running for %.0f s; %d bytes of stdout and %d of stderr so far. wait_job again, or cancel_job.\n", out.Elapsed, r.StdoutBytes, r.StderrBytes)
		if t := lastLines(r.Stdout, 20); t != "" {
			fmt.Fprintf(&b, "\n--- stdout (last lines) ---\n%s\n", t)
		}
		if t := lastLines(r.Stderr, 20); t != "" {
			fmt.Fprintf(&b, "\n--- stderr (last lines) ---\n%s\n", t)
		}
	default:
		res.IsError = r.State != jobs.Cancelled
	}
	res.Content = append([]mcp.Content{&mcp.TextContent{Text: b.String()}}, res.Content...)
	return res, out, nil
}

// lastLines is the end of text, at most n lines.
func lastLines(text string, n int) string {
	text = strings.TrimRight(text, "\n")
	for i := len(text) - 1; i >= 0; i-- {
		if text[i] == '\n' {
			if n--; n == 0 {
				return text[i+1:]
			}
		}
	}
	return text
}

func (t tools) jobResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, "mcp://forge/jobs/")
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	r, err := t.j.Job(t.env.Conn(req.Session), id, "resources/read")
	var re *refusal.Error
	if errors.As(err, &re) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	out := JobOutput{JobView: jobView(r)}
	if er, ok := background.JobResult(r); ok {
		o := execution.ToOutput(er)
		out.Result = &o
		// The result has the output: the tail again, escaped twice (JSON
		// in a JSON string), brought the resource near server.max_message.
		out.Stdout, out.Stderr = "", ""
	}
	return toolsets.JSON(uri, out)
}
