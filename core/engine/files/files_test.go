package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/session"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// docs/audit.md lists every rule a file request can break.
func TestFileRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{RuleFilePath, RuleFileLink, RuleFileType, RuleFileNotFound, RuleFileSize, RuleFileQuota, RuleFileEncoding, RuleInputFiles} {
		if !strings.Contains(string(doc), "| `"+rule+"` |") {
			t.Errorf("docs/audit.md does not list rule %s", rule)
		}
	}
}

func TestMIMEType(t *testing.T) {
	for name, want := range map[string]string{
		"output/result.csv": "text/csv", "a.PNG": "image/png", "x.json": "application/json", "notes": "text/plain",
		"blob": "application/octet-stream",
	} {
		var data []byte
		switch name {
		case "notes":
			data = []byte("hello")
		case "blob":
			data = []byte{0, 1, 2, 0xff}
		}
		if got := mimeType(name, data); got != want {
			t.Errorf("mimeType(%q) = %q, want %q", name, got, want)
		}
	}
}

// A session without an output directory skips the snapshot walks; a run
// that creates the directory still returns what it wrote, a later run only
// what changed, and an output directory replaced by a link returns nothing.
func TestSessionOutputDirectoryAppears(t *testing.T) {
	r := newRig(t, nil, nil)
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		work := filepath.Join(r.WS.SessionPath(req.SessionID), "work")
		out := filepath.Join(work, OutputDir)
		switch req.Code {
		case "mkwork":
			if err := os.MkdirAll(work, 0o755); err != nil {
				return backend.ExecuteResult{}, err
			}
		case "write":
			if err := os.MkdirAll(out, 0o755); err != nil {
				return backend.ExecuteResult{}, err
			}
			if err := os.WriteFile(filepath.Join(out, "a.csv"), []byte("x,y\n"), 0o644); err != nil {
				return backend.ExecuteResult{}, err
			}
		case "link":
			os.MkdirAll(filepath.Join(work, "elsewhere"), 0o755)
			os.WriteFile(filepath.Join(work, "elsewhere", "b.csv"), []byte("1"), 0o644)
			if err := os.RemoveAll(out); err != nil {
				return backend.ExecuteResult{}, err
			}
			if err := os.Symlink("elsewhere", out); err != nil {
				return backend.ExecuteResult{}, err
			}
		}
		return backend.ExecuteResult{Success: true}, nil
	}
	files := func(code string) []string {
		t.Helper()
		res, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s1", Code: code})
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		var out []string
		for _, f := range res.Files {
			out = append(out, f.Path+"="+string(f.Data))
		}
		return out
	}
	for _, step := range []struct{ code, want string }{
		{"mkwork", ""}, // the working directory, no output directory
		{"nothing", ""},
		{"write", "output/a.csv=x,y\n"}, // created by this run
		{"nothing", ""},                 // unchanged
		{"link", ""},                    // a link is never followed
	} {
		if got := strings.Join(files(step.code), " "); got != step.want {
			t.Errorf("run %q returned files %q, want %q", step.code, got, step.want)
		}
	}
}

// An execute compares the output directory with what the last one left:
// a file the kernel wrote between two calls comes with the next one (it
// would otherwise never be reported), a file the client uploaded does not
// (the upload makes the next execute list the directory first).
func TestSessionOutputsBetweenCalls(t *testing.T) {
	r := newRig(t, nil, nil)
	out := func(id string) string { return filepath.Join(r.WS.SessionPath(id), "work", OutputDir) }
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		if req.Code == "write" {
			return backend.ExecuteResult{Success: true}, os.WriteFile(filepath.Join(out(req.SessionID), "a.csv"), []byte("1"), 0o644)
		}
		return backend.ExecuteResult{Success: true}, os.MkdirAll(out(req.SessionID), 0o755)
	}
	files := func(code string) string { return r.outputsOf(t, code, true) }
	internal := session.InternalID("c1", "s1")
	steps := []struct {
		name, code, want string
		between          func()
	}{
		{"first", "mkdir", "", nil},
		{"written by the run", "write", "output/a.csv=1", nil},
		{"unchanged", "mkdir", "", nil},
		{"written by the kernel between calls", "mkdir", "output/b.csv=2", func() {
			os.WriteFile(filepath.Join(out(internal), "b.csv"), []byte("2"), 0o644)
		}},
		{"uploaded between calls", "mkdir", "", func() {
			if _, err := r.e.UploadFile("c1", "s1", OutputDir+"/c.csv", "3", "text"); err != nil {
				t.Fatal(err)
			}
		}},
		{"after the upload", "write", "output/a.csv=1", nil},
	}
	for _, st := range steps {
		if st.between != nil {
			st.between()
		}
		if got := files(st.code); got != st.want {
			t.Errorf("%s: files %q, want %q", st.name, got, st.want)
		}
	}
}

// Every file line names the session by its internal id (docs/audit.md), as
// the session's execution and container lines do, and carries the id the
// caller chose in details.session: two owners' sessions "s1" stay apart.
func TestFileAuditLinesNameTheInternalID(t *testing.T) {
	r := newRig(t, nil, nil)
	r.Kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		return backend.ExecuteResult{Success: true}, os.MkdirAll(filepath.Join(r.WS.SessionPath(req.SessionID), "work"), 0o755)
	}
	for _, client := range []string{"c1", "c2"} {
		if _, err := r.Exec(t, engine.Request{Language: "python", SessionID: "s1", Client: client}); err != nil {
			t.Fatal(err)
		}
	}
	calls := []struct {
		event string
		call  func(client string) error
	}{
		{"file.upload", func(c string) error { _, err := r.e.UploadFile(c, "s1", "a.txt", "hi", ""); return err }},
		{"file.download", func(c string) error { _, err := r.e.ReadFile(c, "s1", "a.txt", "download_file"); return err }},
		{engine.EventRefused, func(c string) error { _, _, err := r.e.ListFiles(c, "s1", "../x"); return err }},
		{engine.EventRefused, func(c string) error { _, err := r.e.UploadFile(c, "s1", "/abs", "hi", ""); return err }},
		{engine.EventRefused, func(c string) error { _, err := r.e.ReadFile(c, "s1", "missing.txt", "download_file"); return err }},
	}
	for _, client := range []string{"c1", "c2"} {
		want := session.InternalID(client, "s1")
		for i, c := range calls {
			n := len(r.Audit())
			err := c.call(client)
			if c.event != engine.EventRefused && err != nil {
				t.Fatalf("call %d (%s) of %s: %v", i, c.event, client, err)
			}
			lines := r.Audit()[n:]
			if len(lines) != 1 {
				t.Fatalf("call %d (%s) of %s wrote %d audit lines, want 1: %+v", i, c.event, client, len(lines), lines)
			}
			e := lines[0]
			if e.Event != c.event || e.SessionID != want || e.Details["session"] != "s1" || e.UserID != client {
				t.Errorf("call %d of %s: audited %s session_id %q details.session %v user %q; want %s, %q, s1, %s",
					i, client, e.Event, e.SessionID, e.Details["session"], e.UserID, c.event, want, client)
			}
		}
	}
}
