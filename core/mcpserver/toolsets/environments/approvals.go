package environments

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// questions are the approval questions this server asked (input requests
// of build_environment) and that have not been answered. An answer the
// client sends (inputResponses) counts only when it carries, as
// requestState, the token of a question this server issued, on the same
// connection (over HTTP: the same tenant), for the same call (the same
// arguments), not expired, and only once. Anything else — an answer on a
// first call, a made-up or replayed token, another connection's token —
// answers nothing: a client that was never asked cannot approve.
//
// The token travels in requestState, which the go-sdk copies into the
// retried call both when the client does the round trip itself (protocol
// 2026-07-28, SEP-2322) and when the SDK asks an older client by
// elicitation/create and calls the handler again.
type questions struct {
	mu  sync.Mutex
	m   map[string]question
	now func() time.Time
}

type question struct {
	conn    string // the connection (tenant) asked
	call    string // digest of the call's tool and arguments
	expires time.Time
}

const (
	// questionTTL bounds how long a question may wait for its answer (a
	// user reading the prompt); an older answer is refused.
	questionTTL = 30 * time.Minute
	// maxQuestions bounds the questions kept: a client that asks and never
	// answers cannot grow the map; the oldest are forgotten first.
	maxQuestions = 4096
)

// Why an answer was ignored.
var (
	errNoState      = errors.New("the call carries an answer (inputResponses) but no requestState: this server asked no question that it answers")
	errUnknownState = errors.New("its requestState names no open question of this server (never asked, already answered, or forgotten)")
	errOtherConn    = errors.New("its requestState names a question asked of another connection")
	errOtherCall    = errors.New("its requestState names a question asked for a call with other arguments")
	errExpired      = errors.New("its requestState names a question asked more than 30 minutes ago")
)

// ask records a question asked of conn for call and returns its token.
func (q *questions) ask(conn, call string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error()) // cannot happen on Linux
	}
	tok := hex.EncodeToString(b)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock()
	if q.m == nil {
		q.m = map[string]question{}
	}
	if len(q.m) >= maxQuestions {
		var oldest string
		for k, v := range q.m {
			if !now.Before(v.expires) {
				delete(q.m, k)
			} else if oldest == "" || v.expires.Before(q.m[oldest].expires) {
				oldest = k
			}
		}
		if len(q.m) >= maxQuestions {
			delete(q.m, oldest)
		}
	}
	q.m[tok] = question{conn: conn, call: call, expires: now.Add(questionTTL)}
	return tok
}

// answer takes the question token names, if it is one conn was asked for
// call: nil then, and the question is gone (an answer counts once).
// Otherwise the error says why the answer is ignored; a token of another
// connection stays open for that connection.
func (q *questions) answer(token, conn, call string) error {
	if token == "" {
		return errNoState
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[token]
	switch {
	case !ok:
		return errUnknownState
	case v.conn != conn:
		return errOtherConn
	}
	delete(q.m, token)
	switch {
	case !q.clock().Before(v.expires):
		return errExpired
	case v.call != call:
		return errOtherCall
	}
	return nil
}

func (q *questions) clock() time.Time {
	if q.now != nil {
		return q.now()
	}
	return time.Now()
}

// callDigest identifies a call by its tool and decoded arguments, so that
// an answer given for one build does not approve another.
func callDigest(tool string, args any) string {
	b, _ := json.Marshal(args)
	h := sha256.Sum256(append([]byte(tool+"\x00"), b...))
	return hex.EncodeToString(h[:])
}

// solicited reports whether req answers a question this server asked of
// conn for call. ignored says why an answer it carries is not one ("" when
// it carries none, or when it is one).
func (q *questions) solicited(req *mcp.CallToolRequest, conn, call string) (answered bool, ignored string) {
	if req == nil || req.Params == nil || len(req.Params.InputResponses) == 0 && req.Params.RequestState == "" {
		return false, ""
	}
	if err := q.answer(req.Params.RequestState, conn, call); err != nil {
		return false, err.Error()
	}
	return true, ""
}
