package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
)

// Audit event and rule of a request whose body did not arrive in time.
const (
	BodyTimeout     = "http.body_timeout"
	RuleBodyTimeout = "server.request_body_timeout"
)

// limitBodyTime gives every request body a deadline: the client has d,
// from the moment its headers were read, to send the whole body. Without
// it a client that sends headers and then stalls (or trickles a byte now
// and then) holds its tenant's request slot, a goroutine and a connection
// forever: http.Server's ReadHeaderTimeout ends at the headers.
//
// This is http.Server.ReadTimeout for the body alone, plus what a refusal
// needs: the error names the setting, and the timeout is audited with its
// rule and tenant. The deadline is lifted once the body has been read to
// its end, so a tool call may then run as long as it needs.
//
// The deadline also bounds the body reads the server does on its own: a
// refused request (401, 429) whose body is unread gets its body drained
// before the response is sent, which a stalled client would stretch
// forever.
func limitBodyTime(h http.Handler, d time.Duration, rec audit.Recorder, log hclog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			// Fail closed: an unbounded body read is what this prevents.
			log.Error("cannot set a read deadline on a request body; refusing the request", "error", err)
			w.Header().Set("Connection", "close")
			http.Error(w, "the server cannot bound how long it reads this request's body ("+err.Error()+"), so it refuses it", http.StatusInternalServerError)
			return
		}
		b := &timedBody{ReadCloser: r.Body, rc: rc, d: d, rec: rec, log: log, remote: r.RemoteAddr}
		r.Body = b
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), timedBodyKey{}, b)))
	})
}

type timedBodyKey struct{}

// noteTenant attributes a request's body timeout to its tenant once
// authentication named it.
func noteTenant(r *http.Request, name string) {
	if b, ok := r.Context().Value(timedBodyKey{}).(*timedBody); ok {
		b.tenant = name
	}
}

// timedBody clears the read deadline at the end of the body and turns a
// deadline error into one that names the setting. Reads happen on the
// handler's goroutine (as does noteTenant), so it needs no lock.
type timedBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	d      time.Duration
	rec    audit.Recorder
	log    hclog.Logger
	remote string
	tenant string
	done   bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || b.done {
		return n, err
	}
	b.done = true
	switch {
	case errors.Is(err, io.EOF):
		// The whole body is here: from now on the request may run as
		// long as its call needs (net/http lifts the deadline for its
		// own background read too; this does not rely on it).
		if cerr := b.rc.SetReadDeadline(time.Time{}); cerr != nil {
			b.log.Warn("cannot clear the request body deadline", "error", cerr)
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		msg := fmt.Sprintf("request body incomplete after %s (%s): send the whole body right after the headers, or raise %s", b.d, RuleBodyTimeout, RuleBodyTimeout)
		b.log.Warn("request body timed out", "remote", b.remote, "tenant", b.tenant, "timeout", b.d)
		b.rec.Record(audit.Entry{Event: BodyTimeout, Severity: audit.Warning, UserID: b.tenant, Error: msg,
			Details: map[string]any{"rule": RuleBodyTimeout, "timeout_seconds": b.d.Seconds(), "remote": b.remote}})
		err = fmt.Errorf("%s: %w", msg, err)
	}
	return n, err
}
