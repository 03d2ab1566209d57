package sdktest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// streamer is a stateless backend.StreamingBackend whose events the test
// writes; late is emitted after ExecuteStream returned.
type streamer struct {
	events []backend.StreamEvent
	late   chan func()
}

func (s *streamer) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"fake"}}, nil
}

func (s *streamer) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true, Stdout: "plain"}, nil
}

func (s *streamer) ExecuteStream(_ context.Context, _ backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	for _, ev := range s.events {
		emit(ev)
	}
	if s.late != nil {
		s.late <- func() { emit(backend.StreamEvent{Name: host.Stdout, Text: "after the result\n"}) }
	}
	return backend.ExecuteResult{Success: true, Stdout: "streamed"}, nil
}

// plainBackend has no ExecuteStream.
type plainBackend struct{}

func (plainBackend) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"fake"}}, nil
}

func (plainBackend) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return backend.ExecuteResult{Success: true, Stdout: "plain"}, nil
}

func serveStateless(t *testing.T, b backend.Backend) backend.StreamingBackend {
	t.Helper()
	factory := func(host.Host, backend.Config) (backend.Backend, error) { return b, nil }
	c := sdktest.Serve(t, plugin.Info{Name: "fake", Version: "0.0.1"}, factory, sdktest.NewLocalHost(t.TempDir()), nil)
	sb, ok := c.(backend.StreamingBackend)
	if !ok {
		t.Fatalf("the core's client %T is not a backend.StreamingBackend", c)
	}
	return sb
}

// A stateless backend's events cross the plugin's gRPC connection in
// order, made valid UTF-8 (the result says where it was replaced), and the
// core passes on at most the run's output cap whatever the plugin sends.
func TestStreamedEventsCrossGRPC(t *testing.T) {
	cases := []struct {
		name      string
		maxOutput int64
		events    []backend.StreamEvent
		want      []backend.StreamEvent
		notice    string
	}{
		{"in order, both streams", 1000,
			[]backend.StreamEvent{{Name: host.Stdout, Text: "one\n"}, {Name: host.Stderr, Text: "two\n"}, {Name: host.Stdout, Text: "three\n"}},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "one\n"}, {Name: host.Stderr, Text: "two\n"}, {Name: host.Stdout, Text: "three\n"}}, ""},
		{"the core keeps to the output cap", 10,
			[]backend.StreamEvent{{Name: host.Stdout, Text: "123456\n"}, {Name: host.Stderr, Text: "abcdef\n"}, {Name: host.Stdout, Text: "more\n"}},
			[]backend.StreamEvent{{Name: host.Stdout, Text: "123456\n"}, {Name: host.Stderr, Text: "abc"}}, ""},
		{"invalid UTF-8 is replaced and named", 1000,
			[]backend.StreamEvent{{Name: host.Stderr, Text: "bad \xff byte\n"}},
			[]backend.StreamEvent{{Name: host.Stderr, Text: "bad \uFFFD byte\n"}}, "stderr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := serveStateless(t, &streamer{events: c.events})
			var got []backend.StreamEvent
			r, err := sb.ExecuteStream(context.Background(), backend.ExecuteRequest{Code: "x", MaxOutputBytes: c.maxOutput}, func(ev backend.StreamEvent) { got = append(got, ev) })
			if err != nil || r.Stdout != "streamed" {
				t.Fatalf("%v %+v", err, r)
			}
			if len(got) != len(c.want) {
				t.Fatalf("events %q, want %q", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("event %d = %q, want %q", i, got[i], c.want[i])
				}
			}
			notices := strings.Join(r.Notices, "\n")
			if c.notice == "" && notices != "" || c.notice != "" && !strings.Contains(notices, c.notice) {
				t.Errorf("notices %q, want one naming %q", notices, c.notice)
			}
		})
	}
}

// A backend without ExecuteStream answers it with its Execute result, no
// event; and an event a streaming backend emits after its result never
// reaches the core.
func TestStreamFallbackAndLateEvents(t *testing.T) {
	t.Run("no ExecuteStream", func(t *testing.T) {
		sb := serveStateless(t, plainBackend{})
		r, err := sb.ExecuteStream(context.Background(), backend.ExecuteRequest{Code: "x", MaxOutputBytes: 100}, func(ev backend.StreamEvent) {
			t.Errorf("event from a backend that does not stream: %+v", ev)
		})
		if err != nil || r.Stdout != "plain" {
			t.Fatalf("%v %+v", err, r)
		}
	})
	t.Run("late event", func(t *testing.T) {
		late := make(chan func(), 1)
		sb := serveStateless(t, &streamer{late: late})
		var mu sync.Mutex
		var got []backend.StreamEvent
		r, err := sb.ExecuteStream(context.Background(), backend.ExecuteRequest{Code: "x", MaxOutputBytes: 100}, func(ev backend.StreamEvent) {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
		})
		if err != nil || r.Stdout != "streamed" {
			t.Fatalf("%v %+v", err, r)
		}
		(<-late)() // the backend emits after its answer went
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 0 {
			t.Errorf("events after the result: %q", got)
		}
	})
}

// The plumbing's cost on a run that prints nothing: a stateless run over
// the plugin's gRPC connection through Execute (unary) and through
// ExecuteStream (server streaming), the path a client asking for progress
// now takes.
func BenchmarkExecuteStreamPlumbing(b *testing.B) {
	factory := func(host.Host, backend.Config) (backend.Backend, error) { return &streamer{}, nil }
	c := sdktest.Serve(b, plugin.Info{Name: "fake", Version: "0.0.1"}, factory, sdktest.NewLocalHost(b.TempDir()), nil)
	req := backend.ExecuteRequest{Code: "x", MaxOutputBytes: 1 << 20}
	b.Run("Execute", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := c.Execute(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ExecuteStream", func(b *testing.B) {
		sb := c.(backend.StreamingBackend)
		for i := 0; i < b.N; i++ {
			if _, err := sb.ExecuteStream(context.Background(), req, func(backend.StreamEvent) {}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
