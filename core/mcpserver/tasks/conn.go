package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Transport serves tasks on every connection of t, for one owner (a stdio
// server serves one client).
func (s *Service) Transport(t mcp.Transport, owner string) mcp.Transport {
	return &transport{t: t, s: s, owner: owner}
}

type transport struct {
	t     mcp.Transport
	s     *Service
	owner string
}

func (t *transport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cn := &conn{Connection: c, s: t.s, owner: t.owner, ctx: ctx, cancel: cancel, rewrite: map[string]rewrite{}, waits: map[string]context.CancelFunc{},
		told: map[string]string{}}
	t.s.mu.Lock()
	t.s.watchers[cn] = struct{}{}
	t.s.mu.Unlock()
	return cn, nil
}

// rewrite is what to do with the server's answer to a request.
type rewrite func(json.RawMessage) (json.RawMessage, error)

// conn answers tasks/* itself, rewrites a task-augmented tools/call into a
// background job and its answer into the task, and adds tasks to the
// capabilities and the task tools' entries of tools/list.
type conn struct {
	mcp.Connection
	s      *Service
	owner  string
	ctx    context.Context // ends with the connection: tasks/result waits end with it
	cancel context.CancelFunc

	mu      sync.Mutex
	rewrite map[string]rewrite            // request id → its answer's rewrite
	waits   map[string]context.CancelFunc // tasks/* requests being answered
	told    map[string]string             // tasks started here → the status last told
}

// key is an id as a map key ("s:" or "n:" and its value: a string "1" and
// a number 1 are two ids).
func key(id jsonrpc.ID) string {
	b, _ := json.Marshal(id.Raw())
	return string(b)
}

func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		switch {
		case IsTasksMethod(req.Method) && req.IsCall():
			c.answer(req)
			continue
		case req.Method == "notifications/cancelled":
			c.cancelWait(req.Params)
		case req.Method == "tools/call" && req.IsCall():
			p, ok, err := c.s.Start(c.owner, req.Params)
			if err != nil {
				_ = c.Connection.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: asWire(err)})
				continue
			}
			if ok {
				req.Params = p
				c.expect(req.ID, func(r json.RawMessage) (json.RawMessage, error) {
					out, err := c.s.Created(c.owner, r)
					if err == nil {
						c.started(out)
					}
					return out, err
				})
			}
		case (req.Method == "initialize" || req.Method == "server/discover") && req.IsCall():
			c.expect(req.ID, Capabilities)
		case req.Method == "tools/list" && req.IsCall():
			c.expect(req.ID, Tools)
		}
		return req, nil
	}
}

func (c *conn) expect(id jsonrpc.ID, fn rewrite) {
	c.mu.Lock()
	c.rewrite[key(id)] = fn
	c.mu.Unlock()
}

func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		k := key(resp.ID)
		c.mu.Lock()
		fn := c.rewrite[k]
		delete(c.rewrite, k)
		c.mu.Unlock()
		if fn != nil && resp.Error == nil {
			out, err := fn(resp.Result)
			if err != nil {
				resp = &jsonrpc.Response{ID: resp.ID, Error: asWire(err), Extra: resp.Extra}
			} else {
				resp = &jsonrpc.Response{ID: resp.ID, Result: out, Extra: resp.Extra}
			}
			msg = resp
		}
	}
	return c.Connection.Write(ctx, msg)
}

// maxWaits bounds the tasks/* requests one connection has answered at
// once (tasks/result waits for the job's end: each holds a goroutine).
const maxWaits = 64

// answer serves a tasks/* request apart from the server's read loop:
// tasks/result waits for the job's end.
func (c *conn) answer(req *jsonrpc.Request) {
	ctx, cancel := context.WithCancel(c.ctx)
	k := key(req.ID)
	c.mu.Lock()
	if len(c.waits) >= maxWaits {
		c.mu.Unlock()
		cancel()
		_ = c.Connection.Write(c.ctx, &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("this connection already waits on %d tasks requests: wait for some to answer", maxWaits)}})
		return
	}
	c.waits[k] = cancel
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			delete(c.waits, k)
			c.mu.Unlock()
			cancel()
		}()
		result, err := c.s.Answer(ctx, c.owner, req.Method, req.Params)
		resp := &jsonrpc.Response{ID: req.ID, Result: result}
		if err != nil {
			resp = &jsonrpc.Response{ID: req.ID, Error: asWire(err)}
		}
		_ = c.Connection.Write(c.ctx, resp)
	}()
}

// cancelWait ends the wait of a tasks/* request the client cancelled.
func (c *conn) cancelWait(params json.RawMessage) {
	var p struct {
		RequestID any `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := jsonrpc.MakeID(p.RequestID)
	if err != nil {
		return
	}
	c.mu.Lock()
	cancel := c.waits[key(id)]
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *conn) Close() error {
	c.s.mu.Lock()
	delete(c.s.watchers, c)
	c.s.mu.Unlock()
	c.cancel()
	return c.Connection.Close()
}

// started remembers a task this connection created, with its status,
// then looks again: a job that changed meanwhile is told now.
func (c *conn) started(created json.RawMessage) {
	var ct struct{ Task Task }
	if json.Unmarshal(created, &ct) != nil || ct.Task.TaskID == "" || ct.Task.Status != Working {
		return // ended already (or refused): nothing more to tell
	}
	c.mu.Lock()
	c.told[ct.Task.TaskID] = ct.Task.Status
	c.mu.Unlock()
	if t, ok := c.s.current(c.owner, ct.Task.TaskID); ok {
		c.status(t)
	}
}

// status sends notifications/tasks/status when a task this connection
// created changes status (not at every line of output).
func (c *conn) status(t Task) {
	c.mu.Lock()
	last, mine := c.told[t.TaskID]
	if mine {
		if t.Status == Completed || t.Status == Failed || t.Status == Cancelled {
			delete(c.told, t.TaskID)
		} else {
			c.told[t.TaskID] = t.Status
		}
	}
	c.mu.Unlock()
	if !mine || last == t.Status {
		return
	}
	params, err := json.Marshal(t)
	if err != nil {
		return
	}
	_ = c.Connection.Write(c.ctx, &jsonrpc.Request{Method: "notifications/tasks/status", Params: params})
}
