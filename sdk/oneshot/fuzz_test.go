package oneshot

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// envelopeSandbox is a host.Sandbox whose one container has already ended:
// it returns a given exit, given logs, and a given meta/result.json. It is a
// fake for the logic that turns those into a result; real runs go through
// the real core in test/.
type envelopeSandbox struct {
	host.Sandbox // unused methods panic
	wait         host.WaitResult
	stdout       []byte
	stderr       []byte
	envelope     []byte
}

func (s *envelopeSandbox) Create(context.Context, host.Intent) (host.Container, error) {
	return host.Container{ID: "c1"}, nil
}
func (s *envelopeSandbox) Start(context.Context, string) error  { return nil }
func (s *envelopeSandbox) Remove(context.Context, string) error { return nil }
func (s *envelopeSandbox) Wait(context.Context, string, time.Duration) (host.WaitResult, error) {
	return s.wait, nil
}

// Logs caps like the core: the first max bytes, with the totals produced.
func (s *envelopeSandbox) Logs(_ context.Context, _ string, max int64) (host.Output, error) {
	capped := func(b []byte) []byte { return b[:min(int64(len(b)), max)] }
	return host.Output{Stdout: capped(s.stdout), Stderr: capped(s.stderr),
		StdoutTotal: int64(len(s.stdout)), StderrTotal: int64(len(s.stderr))}, nil
}

func (s *envelopeSandbox) ReadFiles(_ context.Context, _, subdir string, maxFile, _ int64) ([]host.File, error) {
	if subdir != "meta" {
		return nil, nil
	}
	f := host.File{Name: "result.json", Size: int64(len(s.envelope))}
	if f.Size > maxFile {
		f.Skipped = true
	} else {
		f.Data = s.envelope
	}
	return []host.File{f}, nil
}

type envelopeHost struct{ sb *envelopeSandbox }

func (h envelopeHost) Sandbox() host.Sandbox { return h.sb }
func (h envelopeHost) Audit() host.Audit     { return nil }

// fuzzCap is the output cap of the fuzzed runs: small, so that cuts happen.
const fuzzCap = 64

// FuzzEnvelope: whatever the sandbox left in result.json (user code can
// write that file itself) and printed, the result the plugin returns has
// only valid UTF-8 strings (protobuf refuses anything else, so the run would
// fail as an RPC error instead of a result), no negative byte counts, byte
// counts no smaller than what is returned, line and column that are
// positions (not negative, and fitting the protocol's int32), and Success
// only for a clean exit without an error.
func FuzzEnvelope(f *testing.F) {
	spec := Spec{Language: "python", DefaultImage: "img", Command: func(r string) []string { return []string{r} },
		RunnerAs: "runner.py", CodeAs: "code.py"}
	f.Fuzz(func(t *testing.T, envelope, stdout, stderr []byte, exitCode int, ended byte) {
		sb := &envelopeSandbox{stdout: stdout, stderr: stderr, envelope: envelope,
			wait: host.WaitResult{ExitCode: exitCode}}
		switch ended % 4 {
		case 1:
			sb.wait.TimedOut, sb.wait.Message = true, "timed out after 1s"
		case 2:
			sb.wait.OOMKilled, sb.wait.Message = true, "killed: out of memory"
		case 3:
			sb.wait.Message = "killed"
		}
		b, err := New(spec)(envelopeHost{sb}, backend.Config(fmt.Sprintf(`{"max_output_bytes": %d}`, fuzzCap)))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "1", RunID: "r1"})
		if err != nil {
			t.Fatalf("a finished container is a result, not an error: %v", err)
		}
		checkResult(t, res, stdout, stderr)
	})
}

func checkResult(t *testing.T, res backend.ExecuteResult, stdout, stderr []byte) {
	t.Helper()
	strs := map[string]string{"stdout": res.Stdout, "stderr": res.Stderr, "result_json": res.ResultJSON, "result_repr": res.ResultRepr}
	if e := res.Error; e != nil {
		strs["error.name"], strs["error.message"] = e.Name, e.Message
		for _, l := range e.Traceback {
			strs["error.traceback"] = l
			if !utf8.ValidString(l) {
				break
			}
		}
		if e.Line < 0 || e.Column < 0 || e.Line > math.MaxInt32 || e.Column > math.MaxInt32 {
			t.Fatalf("error position line %d column %d", e.Line, e.Column)
		}
	}
	for i, n := range res.Notices {
		strs["notice"+string(rune('0'+i%10))] = n
	}
	for name, s := range strs {
		if !utf8.ValidString(s) {
			t.Fatalf("%s is not valid UTF-8: %q", name, s)
		}
	}
	// The envelope may raise the counts (the runner saw output it cut), never
	// lower them below what the program produced.
	if res.StdoutBytes < int64(len(stdout)) || res.StderrBytes < int64(len(stderr)) {
		t.Fatalf("byte counts %d/%d below what was produced (%d/%d)", res.StdoutBytes, res.StderrBytes, len(stdout), len(stderr))
	}
	// Valid text comes back unchanged, or, when over the cap, cut at a
	// character boundary at most one character short of the cap.
	for _, o := range []struct{ name, got, produced string }{{"stdout", res.Stdout, string(stdout)}, {"stderr", res.Stderr, string(stderr)}} {
		if !utf8.ValidString(o.produced) {
			continue
		}
		if len(o.produced) <= fuzzCap && o.got != o.produced {
			t.Fatalf("%s %q was changed to %q", o.name, o.produced, o.got)
		}
		if len(o.produced) > fuzzCap && (!strings.HasPrefix(o.produced, o.got) || len(o.got) > fuzzCap || len(o.got) <= fuzzCap-utf8.UTFMax) {
			t.Fatalf("%s %q was cut to %q", o.name, o.produced, o.got)
		}
	}
	if res.Success && (res.Error != nil || res.ExitCode != 0) {
		t.Fatalf("success with error %+v, exit code %d", res.Error, res.ExitCode)
	}
	if !res.Success && res.Error == nil {
		t.Fatalf("a failed run without an error: %+v", res)
	}
}
