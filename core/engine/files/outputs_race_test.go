package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/core/workspace"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// slowFS is a session's files reached like the Kubernetes runtime's: each
// write a round trip, here one the test holds open.
type slowFS struct {
	SessionFS
	entered, release chan struct{}
}

func (f slowFS) WriteFile(rel string, data []byte) error {
	close(f.entered)
	<-f.release
	return f.SessionFS.WriteFile(rel, data)
}

// An upload to output/ whose write is still under way while an execute
// lists output/ at its end: that listing, which lacks the file, is not
// kept as the directory's state, so the next execute does not report the
// upload as its output.
func TestUploadDuringTheLastListingIsNotOutput(t *testing.T) {
	r := newRig(t, nil, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	r.e.SetRemoteSessions(func(id string) (SessionFS, error) {
		f, err := r.WS.SessionFiles(id)
		if err != nil {
			return nil, err
		}
		return slowFS{SessionFS: f, entered: entered, release: release}, nil
	})
	out := func(id string) string { return filepath.Join(r.WS.SessionPath(id), "work", OutputDir) }
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{Success: true}, os.MkdirAll(out(req.SessionID), 0o755)
	}
	files := func() string { return r.outputsOf(t, "x = 1", false) }
	files() // the kernel and output/ exist
	done := make(chan error, 1)
	go func() {
		_, err := r.e.UploadFile("c1", "s1", OutputDir+"/c.csv", "3", "text")
		done <- err
	}()
	<-entered // the upload has counted its write, the write is in flight
	if got := files(); got != "" {
		t.Fatalf("execute during the upload: files %q", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := files(); got != "" {
		t.Errorf("the execute after the upload returns %q as its output: the uploaded file", got)
	}
}

// flakyFS fails one listing the way hostsvc.SessionFS.Snapshot reports a
// failed remote List (an API server hiccup): nil, not known.
type flakyFS struct {
	SessionFS
	fail *bool
}

func (f flakyFS) Snapshot(rel string, max int) map[string]workspace.Stamp {
	if *f.fail {
		*f.fail = false
		return nil
	}
	return f.SessionFS.Snapshot(rel, max)
}

// A failed listing at the end of an execute is not kept as what the last
// execute left: the next execute would return every file already in
// output/ as its own.
func TestFailedListingIsNotKept(t *testing.T) {
	r := newRig(t, nil, nil)
	fail := false
	r.e.SetRemoteSessions(func(id string) (SessionFS, error) {
		f, err := r.WS.SessionFiles(id)
		if err != nil {
			return nil, err
		}
		return flakyFS{SessionFS: f, fail: &fail}, nil
	})
	out := func(id string) string { return filepath.Join(r.WS.SessionPath(id), "work", OutputDir) }
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		if req.Code == "write" {
			os.MkdirAll(out(req.SessionID), 0o755)
			return backend.ExecuteResult{Success: true}, os.WriteFile(filepath.Join(out(req.SessionID), "old.csv"), []byte("1"), 0o644)
		}
		if req.Code == "flaky" {
			fail = true // the listing after this run fails
		}
		return backend.ExecuteResult{Success: true}, nil
	}
	files := func(code string) string { return r.outputsOf(t, code, false) }
	files("write")
	files("flaky")
	if got := files("noop"); got != "" {
		t.Errorf("an execute that wrote nothing returns %q: the files of earlier runs", got)
	}
}

// An upload outside output/ keeps the last execute's listing: a file the
// kernel wrote to output/ between the calls still comes with the next one.
func TestUploadElsewhereKeepsTheListing(t *testing.T) {
	r := newRig(t, nil, nil)
	out := func(id string) string { return filepath.Join(r.WS.SessionPath(id), "work", OutputDir) }
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{Success: true}, os.MkdirAll(out(req.SessionID), 0o755)
	}
	r.outputsOf(t, "1", false)
	// a background thread of the kernel writes, then the client uploads data
	os.WriteFile(filepath.Join(out(session.InternalID("c1", "s1")), "b.csv"), []byte("2"), 0o644)
	if _, err := r.e.UploadFile("c1", "s1", "data.csv", "x", "text"); err != nil {
		t.Fatal(err)
	}
	if got := r.outputsOf(t, "1", false); got != "output/b.csv" {
		t.Error("output/b.csv, written by the kernel between the calls, is never returned")
	}
}

// outputsOf runs code in c1's session s1 and returns the output files
// the run returned: their paths, with "=" and the data when withData.
func (r *rig) outputsOf(t *testing.T, code string, withData bool) string {
	t.Helper()
	res, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: code, Client: "c1"})
	if err != nil {
		t.Fatalf("%s: %v", code, err)
	}
	var got []string
	for _, f := range res.Files {
		if withData {
			got = append(got, f.Path+"="+string(f.Data))
		} else {
			got = append(got, f.Path)
		}
	}
	return strings.Join(got, " ")
}
