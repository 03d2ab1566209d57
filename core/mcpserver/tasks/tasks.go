// Package tasks serves MCP Tasks for the long tools: the tasks of the
// 2025-11-25 specification (SEP-1686) and the io.modelcontextprotocol/tasks
// extension that followed them. An execute_<language> call made as a task
// runs as a background job and answers at once with the task; tasks/get,
// tasks/result, tasks/list and tasks/cancel act on the caller's jobs, with
// the jobs' admission, quotas, owner, time to live and audit lines. A
// build_environment call made a task is its own call run apart (calls.go).
//
// go-sdk v1.8.0 has no tasks and refuses a method outside its own table
// before any middleware runs, so this package works at the wire: Transport
// wraps a connection (stdio) and Handler an HTTP handler (streamable
// HTTP), both around one Service. Everything else passes through
// untouched. It is meant to be dropped when go-sdk serves tasks itself.
package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/background"
	"github.com/mcp-forge/mcp-forge/core/jobs"
	"github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/execution"
)

// Methods and metadata of the protocol.
const (
	MethodGet    = "tasks/get"
	MethodResult = "tasks/result"
	MethodList   = "tasks/list"
	MethodCancel = "tasks/cancel"
	// RelatedTask is the _meta key naming the task a message belongs to.
	RelatedTask = "io.modelcontextprotocol/related-task"
	// Extension names tasks among the capabilities' extensions (the form
	// that followed 2025-11-25's capabilities.tasks).
	Extension = "io.modelcontextprotocol/tasks"
)

// Task statuses.
const (
	Working   = "working"
	Completed = "completed"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// PollInterval is what a client is told to wait between tasks/get.
const PollInterval = 1000 // ms

// Jobs is what tasks need of the background jobs (the engine).
type Jobs interface {
	Job(client, id, tool string) (jobs.Record, error)
	WaitJob(ctx context.Context, client, id string, seconds int) (jobs.Record, error)
	Jobs(client string) []jobs.Record
	CancelJob(ctx context.Context, client, id string) (jobs.Record, error)
	LanguageName(language string) string
	OnJobChange(fn func(jobs.Record))
}

// Service answers tasks for the owners its adapters name.
type Service struct {
	jobs Jobs
	cfg  config.Config

	mu sync.Mutex
	// refused are task calls that failed before a job was started (a
	// refusal, a quota): a task is still answered, failed, holding the
	// tool's error result, so that the client learns why.
	refused map[string]refusedTask
	// watchers hear of the status changes of the tasks they started
	// (notifications/tasks/status, on connections that can carry them).
	watchers map[*conn]struct{}
	// cancelling are tasks cancelled whose job is still being stopped:
	// cancelled already, as tasks/cancel must answer.
	cancelling map[string]bool
	// calls are the tasks that are their tools' own calls (calls.go);
	// running counts their tools still running, closed refuses new ones
	// (Close).
	calls   map[string]*callTask
	running sync.WaitGroup
	closed  bool

	// Keep, when set, holds what a call made a task needs of its request
	// (its caller's identity) while it runs apart from it: called when the
	// task starts, its result when the tool returns.
	Keep func(mcp.Request) (release func())
}

type refusedTask struct {
	owner   string
	created time.Time
	result  json.RawMessage
}

// maxRefused bounds the refused tasks kept per owner (its oldest go
// first): one owner's refusals never push out another's.
const maxRefused = 100

// New serves tasks on j's jobs.
func New(j Jobs, cfg config.Config) *Service {
	s := &Service{jobs: j, cfg: cfg, refused: map[string]refusedTask{}, watchers: map[*conn]struct{}{}, cancelling: map[string]bool{}, calls: map[string]*callTask{}}
	j.OnJobChange(s.changed)
	return s
}

// changed tells the connections that started r as a task of a change of
// its status.
func (s *Service) changed(r jobs.Record) {
	s.mu.Lock()
	if r.State.Finished() {
		delete(s.cancelling, r.ID)
	}
	s.mu.Unlock()
	s.notify(r.Client, s.task(r))
}

// notify tells owner's connections of t's status (those that started it
// pass it on).
func (s *Service) notify(owner string, t Task) {
	s.mu.Lock()
	var to []*conn
	for c := range s.watchers {
		if c.owner == owner {
			to = append(to, c)
		}
	}
	s.mu.Unlock()
	for _, c := range to {
		c.status(t)
	}
}

// current is owner's task id as it is now, of either kind.
func (s *Service) current(owner, id string) (Task, bool) {
	s.mu.Lock()
	c := s.call(owner, id)
	var t Task
	if c != nil {
		t = s.callView(id, c)
	}
	s.mu.Unlock()
	if c != nil {
		return t, true
	}
	r, err := s.jobs.Job(owner, id, "tasks/get")
	if err != nil {
		return Task{}, false
	}
	return s.task(r), true
}

// Task is a task as the protocol shows it.
type Task struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int    `json:"pollInterval,omitempty"`
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// status maps a job's state: a job whose code failed still completed its
// call (the result says isError), so that the client reads the error; a
// job that ended without a result failed.
func status(r jobs.Record) string {
	switch r.State {
	case jobs.Queued, jobs.Running:
		return Working
	case jobs.Cancelled:
		return Cancelled
	case jobs.Done:
		return Completed
	}
	if r.HasResult || len(r.Result) > 0 {
		return Completed
	}
	return Failed
}

func (s *Service) task(r jobs.Record) Task {
	last := r.Created
	for _, t := range []time.Time{r.Started, r.LastProgress, r.Finished} {
		if t.After(last) {
			last = t
		}
	}
	ttl := int64(s.cfg.Jobs.ResultTTL) * 1000
	t := Task{TaskID: r.ID, Status: status(r), CreatedAt: stamp(r.Created), LastUpdatedAt: stamp(last), TTL: &ttl}
	if !r.State.Finished() {
		t.PollInterval = PollInterval
	}
	t.StatusMessage = string(r.State)
	if r.Reason != "" {
		t.StatusMessage += ": " + r.Reason
	}
	s.mu.Lock()
	stopping := s.cancelling[r.ID] && !r.State.Finished()
	s.mu.Unlock()
	if stopping {
		t.Status, t.StatusMessage, t.PollInterval = Cancelled, "cancelled: its sandbox is being stopped", 0
	}
	return t
}

// errNotFound is the protocol's answer for an unknown task, or another
// owner's: the two are not told apart.
func errNotFound(id string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("Failed to retrieve task: Task not found (%q)", id)}
}

// Answer serves a tasks/* request of owner: its result, or an error to
// send as the JSON-RPC error.
func (s *Service) Answer(ctx context.Context, owner, method string, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		TaskID string `json:"taskId"`
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 && json.Unmarshal(params, &p) != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": params must be an object"}
	}
	if method != MethodList && p.TaskID == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + ": taskId is required"}
	}
	switch method {
	case MethodList:
		return s.list(owner)
	case MethodGet:
		if t, ok := s.refusedTask(owner, p.TaskID); ok {
			return json.Marshal(t)
		}
		t, ok := s.current(owner, p.TaskID)
		if !ok {
			return nil, errNotFound(p.TaskID)
		}
		return json.Marshal(t)
	case MethodCancel:
		if t, ok, err := s.cancelCall(owner, p.TaskID); ok {
			if err != nil {
				return nil, err
			}
			return json.Marshal(t)
		}
		if _, ok := s.refusedTask(owner, p.TaskID); ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Cannot cancel task: it is already in terminal status failed"}
		}
		r, err := s.jobs.Job(owner, p.TaskID, "tasks/cancel")
		if err != nil {
			return nil, errNotFound(p.TaskID)
		}
		if t := s.task(r); r.State.Finished() || t.Status == Cancelled {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Cannot cancel task: it is already in terminal status " + t.Status}
		}
		s.mu.Lock()
		s.cancelling[p.TaskID] = true
		s.mu.Unlock()
		if r, err = s.jobs.CancelJob(ctx, owner, p.TaskID); err != nil {
			return nil, err
		}
		if r.State.Finished() {
			s.mu.Lock()
			delete(s.cancelling, p.TaskID)
			s.mu.Unlock()
		}
		return json.Marshal(s.task(r))
	case MethodResult:
		return s.result(ctx, owner, p.TaskID)
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + " is not a tasks method"}
}

func (s *Service) list(owner string) (json.RawMessage, error) {
	out := struct {
		Tasks []Task `json:"tasks"`
	}{Tasks: []Task{}}
	for _, r := range s.jobs.Jobs(owner) {
		out.Tasks = append(out.Tasks, s.task(r))
	}
	s.mu.Lock()
	s.expire()
	for id, rt := range s.refused {
		if rt.owner == owner {
			out.Tasks = append(out.Tasks, refusedView(id, rt, s.cfg))
		}
	}
	for id := range s.calls {
		if c := s.call(owner, id); c != nil {
			out.Tasks = append(out.Tasks, s.callView(id, c))
		}
	}
	s.mu.Unlock()
	return json.Marshal(out)
}

// result waits for the task to end and answers the tool's result, as the
// call would have answered without a task.
func (s *Service) result(ctx context.Context, owner, id string) (json.RawMessage, error) {
	s.mu.Lock()
	s.expire()
	rt, refused := s.refused[id]
	s.mu.Unlock()
	if refused && rt.owner == owner {
		return related(rt.result, id)
	}
	if out, ok, err := s.callResult(ctx, owner, id); ok {
		return out, err
	}
	r, err := s.jobs.Job(owner, id, "tasks/result")
	if err != nil {
		return nil, errNotFound(id)
	}
	for !r.State.Finished() {
		if r, err = s.jobs.WaitJob(ctx, owner, id, s.cfg.Execution.MaxBackgroundTimeout); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	res, ok := background.JobResult(r)
	if !ok {
		// Lost, or cancelled before it ran: no result but why.
		text := fmt.Sprintf("Job %s is %s", r.ID, r.State)
		if r.Reason != "" {
			text += ": " + r.Reason
		}
		b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text + "."}}, "isError": true})
		return related(b, id)
	}
	answer, out := execution.Answer(s.jobs.LanguageName(r.Language), s.cfg, res, r.SessionID)
	answer.StructuredContent = out
	if r.State == jobs.Cancelled {
		answer.IsError = false // stopped as asked: the result shows what ran
	}
	b, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return related(b, id)
}

// related adds the task's id to a result's _meta.
func related(result json.RawMessage, id string) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	meta, _ := m["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[RelatedTask] = map[string]string{"taskId": id}
	m["_meta"] = meta
	return json.Marshal(m)
}

// TaskTool reports whether tool may be called as a task.
func TaskTool(tool string) bool { return strings.HasPrefix(tool, "execute_") || callTools[tool] }

// Start rewrites a tools/call of owner that asks for a task (params.task):
// an execute_<language> call starts a background job instead (StartCall),
// a call tool's call is registered as a task and marked for Middleware.
// ok is false for every other call, which passes untouched.
func (s *Service) Start(owner string, params json.RawMessage) (rewritten json.RawMessage, ok bool, err error) {
	var p map[string]json.RawMessage
	var name string
	if json.Unmarshal(params, &p) != nil || json.Unmarshal(p["name"], &name) != nil || !callTools[name] {
		return StartCall(params)
	}
	if task, asked := p["task"]; !asked || string(task) == "null" {
		return nil, false, nil
	}
	meta := map[string]any{}
	if m, ok := p["_meta"]; ok && string(m) != "null" && json.Unmarshal(m, &meta) != nil {
		return nil, false, nil // not an object: the server refuses it as it is
	}
	id, err := s.startCall(owner, name)
	if err != nil {
		return nil, false, err
	}
	meta[CallMeta] = id
	delete(p, "task")
	if p["_meta"], err = json.Marshal(meta); err != nil {
		return nil, false, err
	}
	out, err := json.Marshal(p)
	return out, err == nil, err
}

// StartCall rewrites a tools/call's params when it asks for a task
// (params.task) of an execute tool: the call starts a background job
// instead. ok is false for every other call, which passes untouched; err
// says a task was asked of a tool that cannot be one.
func StartCall(params json.RawMessage) (rewritten json.RawMessage, ok bool, err error) {
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return nil, false, nil
	}
	// Go's JSON decoding matches field names regardless of case: a key
	// such as "Arguments" beside the "arguments" written below would be
	// read as either, so a call spelling one of these another way is
	// refused rather than rewritten.
	for k := range p {
		for _, want := range []string{"name", "arguments", "task"} {
			if k != want && strings.EqualFold(k, want) {
				return nil, false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("tools/call params: key %q: write it %q (keys are case-sensitive)", k, want)}
			}
		}
	}
	task, asked := p["task"]
	var name string
	if !asked || string(task) == "null" || json.Unmarshal(p["name"], &name) != nil {
		return nil, false, nil
	}
	if !strings.HasPrefix(name, "execute_") {
		return nil, false, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("%s cannot be called as a task (tools/list says which can: execution.taskSupport)", name)}
	}
	args := map[string]json.RawMessage{}
	if a, ok := p["arguments"]; ok && string(a) != "null" {
		if json.Unmarshal(a, &args) != nil {
			return nil, false, nil // not an object: the server refuses it as it is
		}
	}
	args["background"] = json.RawMessage("true")
	delete(p, "task")
	b, err := json.Marshal(args)
	if err != nil {
		return nil, false, nil
	}
	p["arguments"] = b
	out, err := json.Marshal(p)
	return out, err == nil, nil
}

// Created turns the answer of a call StartCall rewrote (a job started, or
// a refusal) into the task the client asked for.
func (s *Service) Created(owner string, result json.RawMessage) (json.RawMessage, error) {
	var r struct {
		IsError    bool `json:"isError"`
		Structured struct {
			JobID  string `json:"job_id"`
			TaskID string `json:"task_id"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(bytes.TrimSpace(result), []byte("{")) {
		return nil, fmt.Errorf("the tool's answer is not an object")
	}
	var t Task
	if id := r.Structured.TaskID; id != "" && !r.IsError {
		var ok bool
		if t, ok = s.current(owner, id); !ok {
			return nil, fmt.Errorf("task %s is not known", id)
		}
	} else if id := r.Structured.JobID; id != "" && !r.IsError {
		rec, err := s.jobs.Job(owner, id, "tasks/get")
		if err != nil {
			return nil, err
		}
		t = s.task(rec)
	} else {
		t = s.refuse(owner, result)
	}
	return json.Marshal(map[string]any{"task": t})
}

// refuse keeps a call that started no job as a failed task.
func (s *Service) refuse(owner string, result json.RawMessage) Task {
	id := "refused-" + jobs.NewID()
	rt := refusedTask{owner: owner, created: time.Now(), result: result}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	var mine []entry
	for k, v := range s.refused {
		if v.owner == owner {
			mine = append(mine, entry{k, v})
		}
	}
	if len(mine) >= maxRefused {
		oldest := slices.MinFunc(mine, func(a, b entry) int { return a.v.created.Compare(b.v.created) })
		delete(s.refused, oldest.k)
	}
	s.refused[id] = rt
	return refusedView(id, rt, s.cfg)
}

type entry struct {
	k string
	v refusedTask
}

// expire forgets refused and call tasks past the jobs' time to live (s.mu held).
func (s *Service) expire() {
	s.expireCalls()
	for id, old := range s.refused {
		if time.Since(old.created) > time.Duration(s.cfg.Jobs.ResultTTL)*time.Second {
			delete(s.refused, id)
		}
	}
}

func refusedView(id string, rt refusedTask, cfg config.Config) Task {
	ttl := int64(cfg.Jobs.ResultTTL) * 1000
	return Task{TaskID: id, Status: Failed, StatusMessage: "refused before it started: tasks/result says why",
		CreatedAt: stamp(rt.created), LastUpdatedAt: stamp(rt.created), TTL: &ttl}
}

func (s *Service) refusedTask(owner, id string) (Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	rt, ok := s.refused[id]
	if !ok || rt.owner != owner {
		return Task{}, false
	}
	return refusedView(id, rt, s.cfg), true
}

// Capabilities adds tasks to an initialize (or server/discover) result's
// capabilities, in both forms.
func Capabilities(result json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, err
	}
	caps, _ := m["capabilities"].(map[string]any)
	if caps == nil {
		return result, nil
	}
	tasks := map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
	caps["tasks"] = tasks
	ext, _ := caps["extensions"].(map[string]any)
	if ext == nil {
		ext = map[string]any{}
	}
	ext[Extension] = tasks
	caps["extensions"] = ext
	return json.Marshal(m)
}

// Tools marks the task tools of a tools/list result (taskSupport optional:
// called without a task they answer as before).
func Tools(result json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, err
	}
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(m["tools"], &tools); err != nil {
		return result, nil
	}
	for _, t := range tools {
		var name string
		if json.Unmarshal(t["name"], &name) == nil && TaskTool(name) {
			t["execution"] = json.RawMessage(`{"taskSupport":"optional"}`)
		}
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return nil, err
	}
	m["tools"] = b
	return json.Marshal(m)
}

// IsTasksMethod reports whether method is one this package answers.
func IsTasksMethod(method string) bool {
	return method == MethodGet || method == MethodResult || method == MethodList || method == MethodCancel
}

// asWire is err as a JSON-RPC error.
func asWire(err error) *jsonrpc.Error {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the request was cancelled"}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}
