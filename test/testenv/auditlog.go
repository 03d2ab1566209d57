package testenv

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
)

// AuditEntry is a line of a server's audit log, as tests read it.
type AuditEntry struct {
	Event   string         `json:"event"`
	Details map[string]any `json:"details"`
}

// AuditEntries reads the audit log at path, in order; a line that is not
// an entry (a torn last line) is skipped.
func AuditEntries(t testing.TB, path string) []AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []AuditEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e AuditEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
