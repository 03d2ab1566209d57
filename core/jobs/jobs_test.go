package jobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/refusal"
)

func rule(err error) string {
	var re *refusal.Error
	if errors.As(err, &re) {
		return re.Rule
	}
	return ""
}

func TestCheckID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{NewID(), true},
		{"job-0123456789abcdef", true},
		{"job-0123456789ABCDEF", false},
		{"job-../../etc/passwd", false},
		{"job-0123456789abcde", false},
		{"", false},
		{strings.Repeat("a", 1<<20), false},
	} {
		if err := CheckID(tc.id); (err == nil) != tc.ok {
			t.Errorf("CheckID(%.30q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

func TestTailKeepsTheEndAtARuneBoundary(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		max    int
		want   string
		total  int64
	}{
		{[]string{"abc", "def"}, 4, "cdef", 6},
		{[]string{"héllo"}, 4, "llo", 6}, // "é" is two bytes: the cut moves past its second
		{[]string{"x"}, 0, "x", 1},
	} {
		var tl tail
		for _, w := range tc.writes {
			tl.write(w, tc.max)
		}
		if tl.String() != tc.want || tl.total != tc.total {
			t.Errorf("%q max %d: %q (%d), want %q (%d)", tc.writes, tc.max, tl.String(), tl.total, tc.want, tc.total)
		}
	}
}

// A record survives the registry: running jobs come back lost with the
// reason, finished ones as they were, expired ones not at all.
func TestRestartFindsJobsLost(t *testing.T) {
	dir := t.TempDir()
	store, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := New(Options{Store: store, TTL: time.Hour, MaxPerClient: 10, TailBytes: 64, Server: "111-5000"})
	if err != nil {
		t.Fatal(err)
	}
	running, _ := r.Add(Record{ID: NewID(), Client: "c", Language: "python"}, func(error) {})
	running.Start("py", "run1")
	running.Output(false, "half way\n")
	running.save(true)
	done, _ := r.Add(Record{ID: NewID(), Client: "c", Language: "python"}, func(error) {})
	done.Start("py", "run2")
	done.Finish(Done, "", []byte(`{"x":1}`))
	old, _ := r.Add(Record{ID: NewID(), Client: "c", Language: "python"}, func(error) {})
	old.Finish(Failed, "boom", nil)
	old.mu.Lock()
	old.rec.Finished = time.Now().Add(-2 * time.Hour)
	old.mu.Unlock()
	old.saveFull()
	if err := os.WriteFile(filepath.Join(dir, "job-zz.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	r2, lost, err := New(Options{Store: store, TTL: time.Hour, MaxPerClient: 10, TailBytes: 64, Server: "222-6000"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) != 1 || lost[0].ID != running.rec.ID {
		t.Fatalf("lost %+v", lost)
	}
	j, err := r2.Get("c", running.rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec := j.Record()
	if rec.State != Lost || !strings.Contains(rec.Reason, "process 111-5000") || rec.Stdout != "half way\n" {
		t.Fatalf("lost job: %+v", rec)
	}
	select {
	case <-j.Done():
	default:
		t.Fatal("a lost job is not done")
	}
	if j, err := r2.Get("c", done.rec.ID); err != nil || string(j.Full().Result) != `{"x":1}` || j.Record().State != Done {
		t.Fatalf("finished job: %v %+v", err, j)
	}
	if _, err := r2.Get("c", old.rec.ID); rule(err) != RuleJobNotFound {
		t.Fatalf("expired job: %v", err)
	}
	if _, err := r2.Get("other", done.rec.ID); rule(err) != RuleJobNotFound {
		t.Fatalf("another client's job: %v", err)
	}
}

func TestChangesAreToldAndOutputThrottled(t *testing.T) {
	r, _, _ := New(Options{TTL: time.Hour, MaxPerClient: 5, TailBytes: 1 << 10})
	var seen []State
	r.OnChange(func(rec Record) { seen = append(seen, rec.State) })
	ctx, cancel := context.WithCancelCause(context.Background())
	j, _ := r.Add(Record{ID: NewID(), Client: "c"}, cancel)
	j.Start("b", "r")
	for range 100 {
		j.Output(false, "line\n")
	}
	j.Cancel(errors.New("stop"))
	if context.Cause(ctx).Error() != "stop" {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	j.Finish(Cancelled, "stop", nil)
	j.Finish(Done, "", nil) // a finished job does not change
	want := []State{Queued, Running, Running, Cancelled}
	if len(seen) != len(want) {
		t.Fatalf("told %v, want %v (100 output events told once)", seen, want)
	}
	if rec := j.Record(); rec.State != Cancelled || rec.Progress != 100 || rec.StdoutBytes != 500 {
		t.Fatalf("%+v", rec)
	}
}

// The server that ran a job is named as procid names it; a record of an
// older server, which kept the bare pid as a number, is still read, and
// its job found lost.
func TestServerIDOfOldAndNewRecords(t *testing.T) {
	for _, c := range []struct {
		name, server, want string
	}{
		{"procid name", `"9164-123456"`, "9164-123456"},
		{"older record's pid", `9164`, "9164"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			store, err := NewStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			id := NewID()
			rec := `{"id":"` + id + `","client":"c","language":"python","state":"running","created":"2026-01-01T00:00:00Z","stdout_bytes":0,"stderr_bytes":0,"progress":0,"server":` + c.server + `}`
			if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(rec), 0o600); err != nil {
				t.Fatal(err)
			}
			_, lost, err := New(Options{Store: store, TTL: time.Hour, MaxPerClient: 10, TailBytes: 64, Server: "1-1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(lost) != 1 || string(lost[0].Server) != c.want || !strings.Contains(lost[0].Reason, "(process "+c.want+") stopped") {
				t.Fatalf("lost %+v, want one job of server %s", lost, c.want)
			}
			saved, err := store.Read(id)
			if err != nil || string(saved.Server) != c.want {
				t.Fatalf("the lost record as saved: server %q, %v", saved.Server, err)
			}
		})
	}
}
