package environments

import (
	"errors"
	"testing"
	"time"
)

// An answer counts only for the question it names, asked of the same
// connection for the same call, within the time allowed, once.
func TestQuestions(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name              string
		token, conn, call string // the answer; "" token: the one asked; "-": none
		wait              time.Duration
		want              error
		again             error // the same answer a second time
	}{
		{"the question asked", "", "c1", "build-a", 0, nil, errUnknownState},
		{"no request state", "-", "c1", "build-a", 0, errNoState, errNoState},
		{"made-up token", "0123456789abcdef0123456789abcdef", "c1", "build-a", 0, errUnknownState, errUnknownState},
		{"another connection", "", "c2", "build-a", 0, errOtherConn, errOtherConn},
		{"another call", "", "c1", "build-b", 0, errOtherCall, errUnknownState},
		{"too late", "", "c1", "build-a", questionTTL, errExpired, errUnknownState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := now
			q := &questions{now: func() time.Time { return clock }}
			tok := q.ask("c1", "build-a")
			answer := tc.token
			switch answer {
			case "":
				answer = tok
			case "-":
				answer = ""
			}
			clock = clock.Add(tc.wait)
			if err := q.answer(answer, tc.conn, tc.call); !errors.Is(err, tc.want) {
				t.Fatalf("answer: %v, want %v", err, tc.want)
			}
			if err := q.answer(answer, tc.conn, tc.call); !errors.Is(err, tc.again) {
				t.Fatalf("the same answer again: %v, want %v", err, tc.again)
			}
		})
	}
	// Questions nobody answers do not pile up.
	q := &questions{}
	first := q.ask("c1", "x")
	for i := 0; i < maxQuestions+10; i++ {
		q.ask("c1", "x")
	}
	if len(q.m) > maxQuestions {
		t.Fatalf("%d questions kept", len(q.m))
	}
	if err := q.answer(first, "c1", "x"); !errors.Is(err, errUnknownState) {
		t.Fatalf("the oldest question should be forgotten: %v", err)
	}
}
