package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// Background jobs: execute_<language> with background: true, then
// wait_job, list_jobs, cancel_job and the job resources.

// Job resources.
const (
	JobTemplate = "mcp://forge/jobs/{id}"
	JobsURI     = "mcp://forge/jobs"
)

func jobURI(id string) string { return "mcp://forge/jobs/" + id }

// Jobs is what the job tools and resources need.
type Jobs interface {
	StartJob(ctx context.Context, req engine.Request) (jobs.Record, error)
	Job(client, id, tool string) (jobs.Record, error)
	WaitJob(ctx context.Context, client, id string, seconds int) (jobs.Record, error)
	Jobs(client string) []jobs.Record
	CancelJob(ctx context.Context, client, id string) (jobs.Record, error)
	OnJobChange(fn func(jobs.Record))
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
	Result *ExecuteOutput `json:"result,omitempty" jsonschema:"the finished job's result, as execute_<language> returns one"`
	Error  *ErrorInfo     `json:"error,omitempty" jsonschema:"why the request failed (not the job's code: see result)"`
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
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Progress: r.Progress, URI: jobURI(r.ID)}
	switch {
	case r.Started.IsZero():
	case r.Finished.IsZero():
		v.Elapsed = time.Since(r.Started).Seconds()
	default:
		v.Elapsed = r.Finished.Sub(r.Started).Seconds()
	}
	return v
}

func (s *Server) addJobTools() {
	// Told from the jobs' goroutines: one sender, so that a slow
	// subscriber holds no job up and notifications do not pile up as
	// goroutines (when it lags, updates are dropped: each says only "read
	// it again", and the next one says it too).
	updates := make(chan string, 256)
	go func() {
		for uri := range updates {
			_ = s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}()
	var states sync.Map // job id → its last state told
	s.jobs.OnJobChange(func(r jobs.Record) {
		uris := []string{jobURI(r.ID)}
		if prev, loaded := states.Swap(r.ID, r.State); !loaded || prev != r.State {
			uris = append(uris, JobsURI) // the list changes with states, not output
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
	jobOut := schemaFor[JobOutput]()
	waitIn := schemaFor[WaitInput]()
	waitIn.Properties["timeout"].Description = fmt.Sprintf("seconds to wait for the job to end (default %d, at most %d); the job keeps running after it. "+
		"A client that sent a progressToken gets progress every %d s while it waits", engine.DefaultJobWait, s.cfg.Execution.MaxBackgroundTimeout, s.cfg.Execution.ProgressInterval)
	addTool(s.mcp, &mcp.Tool{
		Name: "wait_job", Title: "Wait for a background job",
		Description: "Wait until a background job (execute_<language> with background: true) has finished, or until timeout, and return it: its state " +
			"(queued, running, done, failed, cancelled, lost), the last part of its output so far and, once finished, its result in the shape execute_<language> returns " +
			"(with its images as image content). The job is also readable at " + JobTemplate + ".",
		InputSchema: waitIn, OutputSchema: jobOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, JobOutput, error) {
		_, stop := progress(ctx, req, time.Duration(s.cfg.Execution.ProgressInterval)*time.Second)
		r, err := s.jobs.WaitJob(ctx, s.conn(req.Session), in.JobID, in.Timeout)
		stop()
		return s.jobResult(in.JobID, r, err)
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "list_jobs", Title: "List your background jobs",
		Description: fmt.Sprintf("Your background jobs, newest first, with their states and output sizes (wait_job or mcp://forge/jobs/{id} give a job's output); a finished job is kept for %d s (jobs.result_ttl) "+
			"after it ended, across reconnects and server restarts (a job that was running when the server stopped is listed as lost, with the reason).", s.cfg.Jobs.ResultTTL),
		InputSchema: schemaFor[struct{}](), OutputSchema: schemaFor[JobsOutput](),
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, JobsOutput, error) {
		out := JobsOutput{Jobs: jobViews(s.jobs.Jobs(s.conn(req.Session)))}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: jobsText(out.Jobs)}}}, out, nil
	})
	addTool(s.mcp, &mcp.Tool{
		Name: "cancel_job", Title: "Cancel a background job",
		Description: "Stop a background job: code in a session is interrupted and the session's state kept (variables set before remain), as at a timeout; " +
			"a stateless job's container is removed. Waits for the job to end (a few seconds at most) and returns it, its state cancelled. A finished job is returned as it is.",
		InputSchema: schemaFor[JobInput](), OutputSchema: jobOut,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in JobInput) (*mcp.CallToolResult, JobOutput, error) {
		r, err := s.jobs.CancelJob(ctx, s.conn(req.Session), in.JobID)
		return s.jobResult(in.JobID, r, err)
	})
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "job", Title: "Background job", URITemplate: JobTemplate, MIMEType: "application/json",
		Description: "A background job: state, the last part of its output, progress and, once finished, its result (images listed by name: wait_job returns them); " +
			"subscribe (resources/subscribe) to be told of each change",
	}, s.jobResource)
	s.mcp.AddResource(&mcp.Resource{
		URI: JobsURI, Name: "jobs", Title: "Your background jobs", MIMEType: "application/json",
		Description: "Your background jobs, newest first, as list_jobs returns them",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		data, err := json.MarshalIndent(JobsOutput{Jobs: jobViews(s.jobs.Jobs(s.conn(req.Session)))}, "", "  ")
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: JobsURI, MIMEType: "application/json", Text: string(data)}}}, nil
	})
}

// subscribe admits a subscription to one of the caller's jobs or to the
// job list; other URIs change only when the caller acts (or not at all).
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	if s.noSubscriptions != "" {
		return errors.New(s.noSubscriptions)
	}
	if uri == JobsURI {
		return nil
	}
	if id, ok := strings.CutPrefix(uri, "mcp://forge/jobs/"); ok {
		if _, err := s.jobs.Job(s.conn(req.Session), id, "resources/subscribe"); err == nil {
			return nil
		}
		return mcp.ResourceNotFoundError(uri)
	}
	return fmt.Errorf("resources/subscribe: %s does not change on its own; only jobs (%s) and the job list (%s) can be subscribed to", uri, JobTemplate, JobsURI)
}

// NoSubscriptions refuses resources/subscribe with why: a transport
// whose sessions end with each request (stateless streamable HTTP) has no
// one to tell of a change, and a subscription that is accepted and never
// heard from would mislead.
func (s *Server) NoSubscriptions(why string) { s.noSubscriptions = why }

func jobViews(rs []jobs.Record) []JobView {
	out := make([]JobView, len(rs))
	for i, r := range rs {
		out[i] = jobView(r)
	}
	return out
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
func (s *Server) jobResult(id string, r jobs.Record, err error) (*mcp.CallToolResult, JobOutput, error) {
	if err != nil {
		res, e := failure(err)
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
	er, ok := engine.JobResult(r)
	switch {
	case ok:
		o := toOutput(er)
		b.WriteString(s.summary(r.Language, er, o))
		once(&o)
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

func (s *Server) jobResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, "mcp://forge/jobs/")
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	r, err := s.jobs.Job(s.conn(req.Session), id, "resources/read")
	var re *refusal.Error
	if errors.As(err, &re) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	out := JobOutput{JobView: jobView(r)}
	if er, ok := engine.JobResult(r); ok {
		o := toOutput(er)
		out.Result = &o
		// The result has the output: the tail again, escaped twice (JSON
		// in a JSON string), brought the resource near server.max_message.
		out.Stdout, out.Stderr = "", ""
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(data)}}}, nil
}

// startJob answers execute_<language> with background: true.
func (s *Server) startJob(ctx context.Context, req *mcp.CallToolRequest, ereq engine.Request) (*mcp.CallToolResult, ExecuteOutput, error) {
	r, err := s.jobs.StartJob(ctx, ereq)
	if err != nil {
		result, info := failure(err)
		return result, ExecuteOutput{Error: info}, nil
	}
	where := "in a fresh container"
	if r.SessionID != "" {
		where = "in session " + r.SessionID + " (other calls in it are refused until the job ends)"
	}
	text := fmt.Sprintf("Started background job %s: %s runs %s, for at most %d s. Follow it with wait_job (job_id %q), list_jobs or the resource %s; stop it with cancel_job.",
		r.ID, s.exec.LanguageName(r.Language), where, r.TimeoutS, r.ID, jobURI(r.ID))
	for _, n := range r.Notices {
		text += "\nnote: " + n
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}},
		ExecuteOutput{Success: true, JobID: r.ID, JobState: string(r.State), Backend: r.Backend, Notices: r.Notices}, nil
}
