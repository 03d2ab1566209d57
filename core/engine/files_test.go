package engine

import (
	"context"
	"github.com/mcp-forge/mcp-forge/core/checkpoint"
	"github.com/mcp-forge/mcp-forge/core/session"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
)

// docs/audit.md lists every rule a file request can break.
func TestFileRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{RuleFilePath, RuleFileLink, RuleFileType, RuleFileNotFound, RuleFileSize, RuleFileQuota, RuleFileEncoding,
		checkpoint.RuleCheckpointLanguage, checkpoint.RuleCheckpointNotFound, checkpoint.RuleCheckpointOwner, checkpoint.RuleCheckpointState, checkpoint.RuleCheckpointQuota, RuleInputFiles} {
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

func TestRestoreRefusals(t *testing.T) {
	r := newRig(t, nil, nil)
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "s"); refusedBy(t, err) != checkpoint.RuleCheckpointNotFound {
		t.Fatalf("no checkpoint: %v", err)
	}
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "../x"); refusedBy(t, err) != session.RuleSessionID {
		t.Fatalf("a path as id: %v", err)
	}
	// A checkpoint in c1's directory that names another owner answers
	// like none, audited apart.
	dir := ckptDir(r.e, "c1", "s")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"session_id":"s","language":"python","backend":"kernel","owner":"c2"}`), 0o600)
	_, _, err := r.e.RestoreSession(context.Background(), "c1", "s")
	if refusedBy(t, err) != checkpoint.RuleCheckpointOwner || strings.Contains(err.Error(), "c2") {
		t.Fatalf("another's checkpoint: %v", err)
	}
	if got := r.e.Checkpoints("c1"); len(got) != 0 {
		t.Errorf("c1 lists a checkpoint naming c2: %+v", got)
	}
}

// A session without an output directory skips the snapshot walks; a run
// that creates the directory still returns what it wrote, a later run only
// what changed, and an output directory replaced by a link returns nothing.
func TestSessionOutputDirectoryAppears(t *testing.T) {
	r := newRig(t, nil, nil)
	r.kernel.Run = func(_ context.Context, req backend.ExecuteRequest, _ func(backend.StreamEvent)) (backend.ExecuteResult, error) {
		work := filepath.Join(r.ws.SessionPath(req.SessionID), "work")
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
		res, err := r.exec(t, Request{Language: "python", SessionID: "s1", Code: code})
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
