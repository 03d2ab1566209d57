package engine

import (
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
		RuleCheckpointLanguage, RuleCheckpointNotFound, RuleCheckpointOwner, RuleCheckpointState} {
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
