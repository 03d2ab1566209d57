package oneshot

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// chunk is one read of the follower, or a flush (stream "").
type chunk struct {
	stream host.Stream
	data   string
}

var tick = chunk{}

func TestCoalescer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		limit  int64
		chunks []chunk
		want   []backend.StreamEvent
	}{
		{"complete lines go at the flush", 100, []chunk{{host.Stdout, "a\n"}, {host.Stdout, "b\n"}, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "a\nb\n"}}},
		{"a partial line waits one flush", 100, []chunk{{host.Stdout, "a\nhal"}, tick, {host.Stdout, "f"}, tick, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "a\n"}, {Name: host.Stdout, Text: "half"}}},
		{"a line finished in time goes whole", 100, []chunk{{host.Stdout, "hal"}, tick, {host.Stdout, "f\n"}, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "half\n"}}},
		{"streams apart, stdout first", 100, []chunk{{host.Stderr, "e\n"}, {host.Stdout, "o\n"}, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "o\n"}, {Name: host.Stderr, Text: "e\n"}}},
		{"a character cut by a read waits for its rest", 100, []chunk{{host.Stdout, "x\xc3"}, tick, tick, {host.Stdout, "\xa9"}, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "x"}, {Name: host.Stdout, Text: "é"}}},
		{"nothing pending sends nothing", 100, []chunk{tick, tick}, nil},
		{"the limit counts both streams", 6, []chunk{{host.Stdout, "abcd\n"}, {host.Stderr, "efgh\n"}, tick, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "abcd\n"}, {Name: host.Stderr, Text: "e"}}},
		{"a character cut by the limit is not sent", 2, []chunk{{host.Stdout, "aé"}, tick, tick},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "a"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got []backend.StreamEvent
			co := newCoalescer(c.limit, func(ev backend.StreamEvent) { got = append(got, ev) })
			for _, ch := range c.chunks {
				if ch == tick {
					co.flush()
					continue
				}
				co.add(ch.stream, []byte(ch.data))
			}
			if len(got) != len(c.want) {
				t.Fatalf("events %q, want %q", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("event %d = %q, want %q", i, got[i], c.want[i])
				}
			}
		})
	}
}

// A million small writes between two flushes are one event, and what is
// taken stops at the limit: add says so, and the text is bounded.
func TestCoalescerBounds(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	var events []backend.StreamEvent
	co := newCoalescer(limit, func(ev backend.StreamEvent) { events = append(events, ev) })
	full := false
	writes := 0
	for ; writes < 1_000_000 && !full; writes++ {
		full = co.add(host.Stdout, []byte("line ✓\n"))
	}
	if !full || writes >= 1_000_000 {
		t.Fatalf("add took %d writes of 9 bytes and still asks for more, over a %d-byte limit", writes, limit)
	}
	if !co.add(host.Stderr, []byte("late\n")) {
		t.Error("add does not report the limit reached")
	}
	co.flush()
	co.flush()
	total := 0
	for _, ev := range events {
		total += len(ev.Text)
		if !utf8.ValidString(ev.Text) {
			t.Errorf("event of invalid UTF-8: %q", ev.Text[len(ev.Text)-10:])
		}
	}
	if len(events) > 2 || total > limit || total < limit-len("line ✓\n") {
		t.Errorf("%d events, %d bytes; want at most 2 events and %d bytes", len(events), total, limit)
	}
	if !strings.HasPrefix(events[0].Text, "line ✓\nline ✓\n") {
		t.Errorf("events[0] starts %q", events[0].Text[:20])
	}
}

// After close nothing is sent or taken: no output follows the result.
func TestCoalescerClosed(t *testing.T) {
	t.Parallel()
	var events []backend.StreamEvent
	co := newCoalescer(100, func(ev backend.StreamEvent) { events = append(events, ev) })
	co.add(host.Stdout, []byte("before\n"))
	co.close()
	co.close() // twice is harmless
	if co.add(host.Stdout, []byte("after\n")) {
		t.Error("add after close reports the limit: the follower would be cancelled, not left to end with its container")
	}
	co.flush()
	if len(events) != 0 {
		t.Errorf("events after close: %q", events)
	}
	select {
	case <-co.stopped:
	default:
		t.Error("stopped is not closed")
	}
}
