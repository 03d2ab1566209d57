package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/audit.md lists every rule a file request can break.
func TestFileRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{RuleFilePath, RuleFileLink, RuleFileType, RuleFileNotFound, RuleFileSize, RuleFileQuota, RuleFileEncoding,
		RuleCheckpointLanguage, RuleCheckpointNotFound, RuleCheckpointOwner, RuleCheckpointState, RuleCheckpointQuota, RuleInputFiles} {
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
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "s"); refusedBy(t, err) != RuleCheckpointNotFound {
		t.Fatalf("no checkpoint: %v", err)
	}
	if _, _, err := r.e.RestoreSession(context.Background(), "c1", "../x"); refusedBy(t, err) != RuleSessionID {
		t.Fatalf("a path as id: %v", err)
	}
	// A checkpoint in c1's directory that names another owner answers
	// like none, audited apart.
	dir := r.e.checkpointDir("c1", "s")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"session_id":"s","language":"python","backend":"kernel","owner":"c2"}`), 0o600)
	_, _, err := r.e.RestoreSession(context.Background(), "c1", "s")
	if refusedBy(t, err) != RuleCheckpointOwner || strings.Contains(err.Error(), "c2") {
		t.Fatalf("another's checkpoint: %v", err)
	}
	if got := r.e.Checkpoints("c1"); len(got) != 0 {
		t.Errorf("c1 lists a checkpoint naming c2: %+v", got)
	}
}
