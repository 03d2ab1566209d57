package tasks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcp-forge/mcp-forge/core/config"
)

// Handler serves tasks in front of next, a streamable HTTP MCP handler:
// a POSTed tasks/* request is answered here (application/json), a
// task-augmented tools/call goes on as a background job whose answer is
// rewritten into the task, and capabilities and tools/list are marked.
// identify names a request's owner (its tenant); maxBody bounds what is
// read to look (a larger body goes on untouched, for next to refuse).
func (s *Service) Handler(next http.Handler, identify func(*http.Request) (string, error), maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		switch {
		case err != nil:
			// next reads the same failure (a body deadline's error names
			// its setting), after what did arrive.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), failed{err}))
			next.ServeHTTP(w, r)
			return
		case int64(len(body)) > maxBody:
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
			next.ServeHTTP(w, r)
			return
		}
		pass := func(b []byte, w http.ResponseWriter) {
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
			next.ServeHTTP(w, r)
		}
		msg, err := jsonrpc.DecodeMessage(body)
		req, ok := msg.(*jsonrpc.Request)
		if err != nil || !ok || !req.IsCall() {
			pass(body, w)
			return
		}
		var fn rewrite
		switch {
		case IsTasksMethod(req.Method):
			// Answered here, so checked here as go-sdk checks what it
			// answers: a web page rebinding a name to this loopback server
			// must not read the user's tasks.
			if status, why := refusedRequest(r); status != 0 {
				http.Error(w, why, status)
				return
			}
			s.serveTasks(w, r, req, identify)
			return
		case req.Method == "tools/call" && asksTask(req.Params):
			owner, err := identify(r)
			if err != nil {
				writeJSON(w, &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}})
				return
			}
			p, ok, err := s.Start(owner, req.Params)
			if err != nil {
				writeJSON(w, &jsonrpc.Response{ID: req.ID, Error: asWire(err)})
				return
			}
			if !ok {
				break
			}
			req.Params = p
			if body, err = jsonrpc.EncodeMessage(req); err != nil {
				writeJSON(w, &jsonrpc.Response{ID: req.ID, Error: asWire(err)})
				return
			}
			fn = func(res json.RawMessage) (json.RawMessage, error) { return s.Created(owner, res) }
		case req.Method == "initialize" || req.Method == "server/discover":
			fn = Capabilities
		case req.Method == "tools/list":
			fn = Tools
		}
		if fn == nil {
			pass(body, w)
			return
		}
		rw := &rewriter{ResponseWriter: w, id: key(req.ID), fn: fn}
		pass(body, rw)
		rw.finish()
	})
}

// refusedRequest is go-sdk's refusal of a request (its status, and why),
// 0 for none: a server on loopback answers loopback Host names only (DNS
// rebinding), and the body must be declared JSON (no simple cross-site
// form post).
func refusedRequest(r *http.Request) (int, string) {
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil {
		if loopback(local.String()) && !loopback(r.Host) {
			return http.StatusForbidden, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host)
		}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return http.StatusUnsupportedMediaType, "Content-Type must be 'application/json'"
	}
	return 0, ""
}

func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return config.IsLoopbackHost(host)
}

// failed is a reader that fails as the body did.
type failed struct{ err error }

func (f failed) Read([]byte) (int, error) { return 0, f.err }

func (s *Service) serveTasks(w http.ResponseWriter, r *http.Request, req *jsonrpc.Request, identify func(*http.Request) (string, error)) {
	owner, err := identify(r)
	if err != nil {
		writeJSON(w, &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}})
		return
	}
	result, err := s.Answer(r.Context(), owner, req.Method, req.Params)
	if err != nil {
		writeJSON(w, &jsonrpc.Response{ID: req.ID, Error: asWire(err)})
		return
	}
	writeJSON(w, &jsonrpc.Response{ID: req.ID, Result: result})
}

func writeJSON(w http.ResponseWriter, resp *jsonrpc.Response) {
	b, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// rewriter rewrites the answer to one request in next's response, an
// event stream or one JSON message.
type rewriter struct {
	http.ResponseWriter
	id      string
	fn      rewrite
	decided bool
	sse     bool
	status  int
	buf     bytes.Buffer
}

func (rw *rewriter) decide() {
	if rw.decided {
		return
	}
	rw.decided = true
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	rw.sse = strings.HasPrefix(rw.Header().Get("Content-Type"), "text/event-stream")
	rw.Header().Del("Content-Length") // the rewritten answer is not the same length
	if rw.sse || rw.status != http.StatusOK {
		rw.ResponseWriter.WriteHeader(rw.status)
	}
}

func (rw *rewriter) WriteHeader(code int) {
	if rw.decided {
		return
	}
	rw.status = code
	rw.decide()
}

func (rw *rewriter) Write(b []byte) (int, error) {
	rw.decide()
	if rw.status != http.StatusOK {
		return rw.ResponseWriter.Write(b)
	}
	rw.buf.Write(b)
	if rw.sse {
		return len(b), rw.lines()
	}
	return len(b), nil
}

// lines passes on each complete line of the event stream, the data line
// of the answer rewritten.
func (rw *rewriter) lines() error {
	for {
		i := bytes.IndexByte(rw.buf.Bytes(), '\n')
		if i < 0 {
			return nil
		}
		line := append([]byte(nil), rw.buf.Next(i+1)...)
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			body := bytes.TrimRight(data, "\r\n")
			if out, changed := rw.message(body); changed {
				line = append(append([]byte("data: "), out...), data[len(body):]...)
			}
		}
		if _, err := rw.ResponseWriter.Write(line); err != nil {
			return err
		}
	}
}

// message is the rewritten answer when data is it (changed), else data.
func (rw *rewriter) message(data []byte) ([]byte, bool) {
	msg, err := jsonrpc.DecodeMessage(data)
	resp, ok := msg.(*jsonrpc.Response)
	if err != nil || !ok || key(resp.ID) != rw.id || resp.Error != nil {
		return data, false
	}
	out, err := rw.fn(resp.Result)
	if err != nil {
		out, err = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: resp.ID, Error: asWire(err)})
	} else {
		out, err = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: resp.ID, Result: out})
	}
	if err != nil {
		return data, false
	}
	return out, true
}

func (rw *rewriter) Flush() {
	if rw.sse {
		if f, ok := rw.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// finish writes what is held: the JSON answer, rewritten, or the last
// partial line of a stream.
func (rw *rewriter) finish() {
	if !rw.decided || rw.status != http.StatusOK {
		return
	}
	if rw.sse {
		_, _ = rw.ResponseWriter.Write(rw.buf.Bytes())
		return
	}
	out, _ := rw.message(bytes.TrimSpace(rw.buf.Bytes()))
	rw.Header().Set("Content-Length", strconv.Itoa(len(out)))
	rw.ResponseWriter.WriteHeader(http.StatusOK)
	_, _ = rw.ResponseWriter.Write(out)
}
