package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/jobs"
)

// A long tool that is not code (build_environment) has no background job
// to stand for its task: the task is the call itself, run apart from its
// request. The wire (conn.go, http.go) registers the task and marks the
// call with its id in _meta; Middleware, beneath go-sdk's dispatch, runs the
// marked call on a context of its own and answers at once; the tool's own
// answer becomes the task's result. Such tasks live as long as the
// server: after a restart tasks/get does not know them.

// callTools are the tools whose tasks are their own calls.
var callTools = map[string]bool{"build_environment": true}

// CallMeta is the _meta key by which the wire hands a call it made a task
// of to Middleware: the id of the task it registered.
const CallMeta = "mcp-forge/task"

const (
	// maxRunningCalls bounds the call tasks one owner runs at once: each
	// holds a goroutine and its tool's own resources.
	maxRunningCalls = 8
	// maxCalls bounds the call tasks kept per owner, finished ones
	// forgotten oldest first.
	maxCalls = 100
	// unclaimedTTL forgets a task whose call never reached Middleware
	// (go-sdk refused it before dispatch: the client got that error); a
	// call reaches it within microseconds.
	unclaimedTTL = 10 * time.Second
)

type callTask struct {
	owner, tool      string
	created, updated time.Time
	status           string
	claimed          bool
	finished         bool // its tool returned: a cancelled task runs on until then
	cancel           context.CancelFunc
	result           json.RawMessage // the tool's answer
	failure          string          // or why there is none
	done             chan struct{}
}

// startCall registers a task for a call of tool by owner.
func (s *Service) startCall(owner, tool string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the server is stopping: no new task starts"}
	}
	s.expire()
	var running int
	var done []string
	for id, c := range s.calls {
		if c.owner != owner {
			continue
		}
		if !c.finished {
			running++ // a cancelled task holds its place until its tool returns
		} else {
			done = append(done, id)
		}
	}
	if running >= maxRunningCalls {
		return "", &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("%d of your tasks are running already (at most %d): wait for one to end, or cancel one (tasks/cancel)", running, maxRunningCalls)}
	}
	if running+len(done) >= maxCalls && len(done) > 0 {
		slices.SortFunc(done, func(a, b string) int { return s.calls[a].updated.Compare(s.calls[b].updated) })
		delete(s.calls, done[0])
	}
	now := time.Now()
	id := "task-" + jobs.NewID()
	s.calls[id] = &callTask{owner: owner, tool: tool, created: now, updated: now, status: Working, done: make(chan struct{})}
	return id, nil
}

// Middleware runs a tools/call the wire made a task of apart from its
// request: the call answers at once with the task's id (Created turns
// that into the task), and the tool's answer becomes the task's result.
// The run keeps the request's values (the caller, its trace) but not its
// end: it ends with the tool, or with tasks/cancel.
func (s *Service) Middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil || call.Params.Meta == nil {
			return next(ctx, method, req)
		}
		raw, marked := call.Params.Meta[CallMeta]
		if !marked {
			return next(ctx, method, req)
		}
		delete(call.Params.Meta, CallMeta)
		id, _ := raw.(string)
		run, cancel := context.WithCancel(context.WithoutCancel(ctx))
		if !s.claim(id, call.Params.Name, cancel) {
			cancel()
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("_meta[%q] names no task this server started for this call", CallMeta)}
		}
		release := func() {}
		if s.Keep != nil {
			release = s.Keep(req)
		}
		go func() {
			defer s.running.Done()
			defer release()
			defer cancel()
			res, err := next(run, method, req)
			s.finishCall(id, res, err)
		}()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Task " + id + " started."}},
			StructuredContent: map[string]any{"task_id": id}}, nil
	}
}

// claim hands a registered, unclaimed task of tool to its call, once,
// and counts the tool as running (its goroutine calls s.running.Done).
func (s *Service) claim(id, tool string, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[id]
	if c == nil || c.claimed || c.tool != tool || s.closed {
		return false
	}
	c.claimed, c.cancel = true, cancel
	s.running.Add(1)
	return true
}

// Close stops the call tasks as the server stops: none starts any more,
// the running ones are cancelled, and Close waits (until ctx ends) for
// their tools to return, so that their last audit lines are written
// before the audit log closes.
func (s *Service) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	for _, c := range s.calls {
		if c.cancel != nil && !c.finished {
			c.cancel()
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (s *Service) finishCall(id string, res mcp.Result, err error) {
	s.mu.Lock()
	c := s.calls[id]
	if c == nil {
		s.mu.Unlock()
		return
	}
	if err == nil {
		c.result, err = json.Marshal(res)
	}
	if err != nil {
		c.failure = err.Error()
	}
	if c.status == Working {
		c.status = Completed
		if c.failure != "" {
			c.status = Failed
		} else if inputRequired(res) {
			// A question for the user (package approval, protocol
			// 2026-07-28): a task cannot carry the answer back into the
			// call, so the task failed; its result holds the question.
			c.status, c.failure = Failed, "it needs the user's answer (package approval): call "+c.tool+" without a task to be asked"
		}
	}
	c.finished = true
	c.updated = time.Now()
	close(c.done)
	owner, t := c.owner, s.callView(id, c)
	s.mu.Unlock()
	s.notify(owner, t)
}

// call is owner's call task id (s.mu held). A task is known once its
// call has claimed it: its id was not told before, so nothing could have
// cancelled it earlier.
func (s *Service) call(owner, id string) *callTask {
	if c := s.calls[id]; c != nil && c.owner == owner && c.claimed {
		return c
	}
	return nil
}

func (s *Service) callView(id string, c *callTask) Task {
	ttl := int64(s.cfg.Jobs.ResultTTL) * 1000
	t := Task{TaskID: id, Status: c.status, StatusMessage: c.tool + ": " + c.status, CreatedAt: stamp(c.created), LastUpdatedAt: stamp(c.updated), TTL: &ttl}
	if c.failure != "" {
		t.StatusMessage += ": " + c.failure
	}
	if c.status == Working {
		t.PollInterval = PollInterval
	}
	return t
}

// cancelCall stops owner's call task id: cancelled at once, as
// tasks/cancel answers, while its tool stops.
func (s *Service) cancelCall(owner, id string) (Task, bool, error) {
	s.mu.Lock()
	c := s.call(owner, id)
	if c == nil {
		s.mu.Unlock()
		return Task{}, false, nil
	}
	if c.status != Working {
		s.mu.Unlock()
		return Task{}, true, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Cannot cancel task: it is already in terminal status " + c.status}
	}
	c.status, c.updated = Cancelled, time.Now()
	if c.cancel != nil {
		c.cancel()
	}
	t := s.callView(id, c)
	s.mu.Unlock()
	s.notify(owner, t)
	return t, true, nil
}

// callResult waits for owner's call task id to end and answers the
// tool's answer.
func (s *Service) callResult(ctx context.Context, owner, id string) (json.RawMessage, bool, error) {
	s.mu.Lock()
	c := s.call(owner, id)
	s.mu.Unlock()
	if c == nil {
		return nil, false, nil
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
	if c.result == nil {
		return nil, true, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: c.tool + " failed: " + c.failure}
	}
	out, err := related(c.result, id)
	return out, true, err
}

// expireCalls forgets finished call tasks past the jobs' time to live,
// and tasks whose call never came (s.mu held).
func (s *Service) expireCalls() {
	ttl := time.Duration(s.cfg.Jobs.ResultTTL) * time.Second
	for id, c := range s.calls {
		if (c.finished && time.Since(c.updated) > ttl) || (!c.claimed && time.Since(c.created) > unclaimedTTL) {
			delete(s.calls, id)
		}
	}
}

// inputRequired reports whether a tool's answer asks the client for input
// (a multi round-trip result) instead of answering.
func inputRequired(res mcp.Result) bool {
	r, ok := res.(*mcp.CallToolResult)
	return ok && r.NeedsInput()
}

// asksTask reports whether a tools/call's params ask for a task.
func asksTask(params json.RawMessage) bool {
	var p struct {
		Task json.RawMessage `json:"task"`
	}
	return json.Unmarshal(params, &p) == nil && len(p.Task) > 0 && string(p.Task) != "null"
}
