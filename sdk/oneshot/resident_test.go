package oneshot

import (
	"bufio"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// dialSandbox is a host.Sandbox whose one container's runner is reached by
// Dial: a scripted list of errors, then the test's end of a pipe. A fake
// for the readiness logic; the runners themselves are run by the plugins'
// tests (sdktest.LocalHost) and through Podman in test/e2e.
type dialSandbox struct {
	host.Sandbox // unused methods panic
	dialErrs     []error
	dials        int
	endpoints    []string
	running      bool
	runner       net.Conn // the runner's end of the connection Dial returns
}

func (s *dialSandbox) Start(context.Context, string) error { return nil }
func (s *dialSandbox) State(context.Context, string) (host.State, error) {
	return host.State{Running: s.running, ExitCode: 3}, nil
}

func (s *dialSandbox) Dial(_ context.Context, id, endpoint string) (net.Conn, error) {
	s.dials++
	s.endpoints = append(s.endpoints, endpoint)
	if len(s.dialErrs) > 0 {
		err := s.dialErrs[0]
		s.dialErrs = s.dialErrs[1:]
		return nil, err
	}
	backend, runner := net.Pipe()
	s.runner = runner
	return backend, nil
}

// connect dials the runner's declared endpoint until it accepts, retrying
// only "nothing listens yet", and reports a container that ended first as
// a start error.
func TestConnectReadiness(t *testing.T) {
	t.Parallel()
	unavailable := host.Errorf(host.KindUnavailable, "not listening")
	cases := []struct {
		name      string
		errs      []error
		running   bool
		dials     int
		wantErr   string
		wantStart bool
	}{
		{"ready at once", nil, true, 1, "", false},
		{"ready after three tries", []error{unavailable, unavailable, unavailable}, true, 4, "", false},
		{"no such endpoint is not retried", []error{host.Errorf(host.KindNotFound, "no endpoint runner")}, true, 1, "no endpoint runner", false},
		{"a broken host is not retried", []error{errors.New("broker gone")}, true, 1, "broker gone", false},
		{"the runner ended", repeat(unavailable, 1000), false, -1, "ended (exit code 3) before it was ready", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sb := &dialSandbox{dialErrs: c.errs, running: c.running}
			b := &Backend{spec: Spec{Language: "python"}, sb: sb}
			r, err := b.connect(context.Background(), host.Container{ID: "c1"})
			var se *startError
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				r.close()
			} else if err == nil || !strings.Contains(err.Error(), c.wantErr) || errors.As(err, &se) != c.wantStart {
				t.Fatalf("err = %v, want %q (start error: %v)", err, c.wantErr, c.wantStart)
			}
			if c.dials >= 0 && sb.dials != c.dials {
				t.Errorf("%d dials, want %d", sb.dials, c.dials)
			}
			for _, e := range sb.endpoints {
				if e != runnerEndpoint.Name {
					t.Fatalf("dialed %q", e)
				}
			}
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// A resident's connection, from the backend's side: the runner is alive
// while it says nothing; the one line it writes after the request is the
// answer, within the limit; anything else (silence broken before the
// request, no newline, too long, not JSON) is no answer.
func TestResidentAnswer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		early      string // written before the request; "close" closes instead
		answer     string // written after the request, then "close" closes
		limit      int64
		aliveAfter bool
		wantErr    string
		wantExit   int
	}{
		{"answer", "", `{"exit_code": 2, "repr": "x"}` + "\n", 1 << 20, true, "", 2},
		{"answer then more", "", `{"exit_code": 0}` + "\nnoise", 1 << 20, true, "", 0},
		{"closed before the request", "close", "", 1 << 20, false, "EOF", 0},
		{"wrote before the request", `{"exit_code": 0}` + "\n", "", 1 << 20, false, "over 0 bytes", 0},
		{"closed without an answer", "", "close", 1 << 20, true, "EOF", 0},
		{"no newline", "", `{"exit_code": 0}close`, 1 << 20, true, "EOF", 0},
		{"over the limit", "", `{"repr": "` + strings.Repeat("x", 200) + `"}` + "\n", 100, true, "over 100 bytes", 0},
		{"not an envelope", "", "[1, 2]\n", 1 << 20, true, "not an envelope", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			backend, runner := net.Pipe()
			r := newResident(host.Container{ID: "c1"}, backend)
			defer r.close()
			if !r.alive() {
				t.Fatal("dead at once")
			}
			write := func(s string) {
				go func() {
					data, closing := strings.CutSuffix(s, "close")
					runner.Write([]byte(data))
					if closing {
						runner.Close()
					}
				}()
			}
			if c.early != "" {
				write(c.early)
				waitAnswered(t, r)
				if r.alive() || r.err == nil || !strings.Contains(r.err.Error(), c.wantErr) {
					t.Fatalf("alive %v, err %v; want dead with %q", r.alive(), r.err, c.wantErr)
				}
				return
			}
			got := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(runner).ReadString('\n')
				got <- line
			}()
			if err := r.send(request{Code: "print(1)\nx", MaxOutput: 7}, c.limit); err != nil {
				t.Fatal(err)
			}
			if line := <-got; line != `{"code":"print(1)\nx","max_output":7}`+"\n" {
				t.Fatalf("the runner read %q", line)
			}
			if !r.alive() {
				t.Fatal("dead before it answered")
			}
			write(c.answer)
			waitAnswered(t, r)
			switch {
			case c.wantErr == "" && (r.err != nil || r.env.ExitCode != c.wantExit):
				t.Fatalf("answer %+v, %v", r.env, r.err)
			case c.wantErr != "" && (r.err == nil || !strings.Contains(r.err.Error(), c.wantErr)):
				t.Fatalf("err %v, want %q", r.err, c.wantErr)
			}
		})
	}
}

func waitAnswered(t *testing.T, r *resident) {
	t.Helper()
	select {
	case <-r.answered:
	case <-time.After(10 * time.Second):
		t.Fatal("no end to the wait for an answer")
	}
}

// A request the runner does not read is given up after sendTimeout as not
// delivered, not waited for forever.
func TestSendToARunnerThatDoesNotRead(t *testing.T) {
	t.Parallel()
	backend, runner := net.Pipe() // unbuffered: a write waits for a read
	defer runner.Close()
	// send sets its own deadline; the wrapper shortens it to keep the
	// test fast.
	r := newResident(host.Container{ID: "c1"}, &shortDeadline{Conn: backend, d: 50 * time.Millisecond})
	defer r.close()
	err := r.send(request{Code: "1"}, 100)
	if !errors.Is(err, errNotDelivered) {
		t.Fatalf("send: %v", err)
	}
}

// shortDeadline turns every write deadline into one d from now.
type shortDeadline struct {
	net.Conn
	d time.Duration
}

func (s *shortDeadline) SetWriteDeadline(time.Time) error {
	return s.Conn.SetWriteDeadline(time.Now().Add(s.d))
}

// FuzzRunnerAnswer: whatever comes back on the runner's connection, the
// reader ends with an envelope or an error, never reads past the limit's
// line, and an envelope is the first line.
func FuzzRunnerAnswer(f *testing.F) {
	for _, s := range []string{`{"exit_code": 1}` + "\n", "\n", "", `{"repr": "\u0000"}` + "\nx", strings.Repeat("{", 5000), `{"error": {"line": -1}}` + "\n"} {
		f.Add([]byte(s), int64(1<<20))
		f.Add([]byte(s), int64(10))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit int64) {
		env, err := readEnvelope(bufio.NewReaderSize(strings.NewReader(string(data)), 16), limit)
		if err != nil {
			return
		}
		first, _, found := strings.Cut(string(data), "\n")
		if !found || int64(len(first)+1) > limit {
			t.Fatalf("an envelope %+v from %q (limit %d)", env, data, limit)
		}
	})
}

// What a runner's answer carries is the sandbox's word: it is held to the
// caps a read of the files applies, and a part that is not what a read
// could give is read from the files instead.
func TestFromAnswer(t *testing.T) {
	t.Parallel()
	const maxOut, maxImg = 4, 10
	cases := []struct {
		name                  string
		inline                string
		outputRead, filesRead bool
		stdout                string
		stdoutTotal           int64
		files                 []host.File
	}{
		{"none", ``, false, false, "", 0, nil},
		{"output only", `{"output": {"stdout": "aGk=", "stderr": ""}}`, true, false, "hi", 2, nil},
		{"output over the cap", `{"output": {"stdout": "aGVsbG8gd29ybGQ="}, "files": []}`, true, true, "hell", 11, []host.File{}},
		{"an image, one over its cap, one listed without data", `{"output": {}, "files": [{"name": "a.png", "size": 2, "data": "aGk="}, {"name": "b.png", "size": 11, "data": "aGVsbG8gd29ybGQ="}, {"name": "c.png", "size": 99}]}`, true, true, "", 0,
			[]host.File{{Name: "a.png", Size: 2, Data: []byte("hi")}, {Name: "b.png", Size: 11, Skipped: true}, {Name: "c.png", Size: 99, Skipped: true}}},
		{"past the total", `{"files": [{"name": "a.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "b.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "c.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "d.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "e.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}]}`, false, true, "", 0,
			[]host.File{{Name: "a.png", Size: 10, Data: []byte("0123456789")}, {Name: "b.png", Size: 10, Data: []byte("0123456789")}, {Name: "c.png", Size: 10, Data: []byte("0123456789")}, {Name: "d.png", Size: 10, Data: []byte("0123456789")}, {Name: "e.png", Size: 10, Skipped: true}}},
		{"an input image counts toward nothing", `{"files": [{"name": "in.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "a.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "b.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "c.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}, {"name": "d.png", "size": 10, "data": "MDEyMzQ1Njc4OQ=="}]}`, false, true, "", 0,
			[]host.File{{Name: "a.png", Size: 10, Data: []byte("0123456789")}, {Name: "b.png", Size: 10, Data: []byte("0123456789")}, {Name: "c.png", Size: 10, Data: []byte("0123456789")}, {Name: "d.png", Size: 10, Data: []byte("0123456789")}}},
		{"a path for a name", `{"files": [{"name": "../x.png", "size": 2, "data": "aGk="}]}`, false, false, "", 0, nil},
		{"a dot", `{"files": [{"name": "..", "size": 0}]}`, false, false, "", 0, nil},
		{"a size below the data", `{"files": [{"name": "a.png", "size": 1, "data": "aGk="}]}`, false, false, "", 0, nil},
		{"a NUL in a name", `{"files": [{"name": "a\u0000.png", "size": 0}]}`, false, false, "", 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			line := `{"exit_code": 0}`
			if c.inline != "" {
				line = `{"exit_code": 0, "inline": ` + c.inline + `}`
			}
			env, err := readEnvelope(bufio.NewReader(strings.NewReader(line+"\n")), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			o := outcome{env: &env}
			o.fromAnswer(maxOut, maxImg, map[string][]byte{"in.png": []byte("x")})
			if o.outputRead != c.outputRead || o.filesRead != c.filesRead || string(o.stdout) != c.stdout || o.stdoutTotal != c.stdoutTotal {
				t.Fatalf("output %v %q (%d), files %v; want %v %q (%d), %v", o.outputRead, o.stdout, o.stdoutTotal, o.filesRead, c.outputRead, c.stdout, c.stdoutTotal, c.filesRead)
			}
			if !reflect.DeepEqual(o.files, c.files) {
				t.Fatalf("files %+v; want %+v", o.files, c.files)
			}
			if env.Inline != nil {
				t.Fatal("the inlined part is kept in the envelope")
			}
		})
	}
}
