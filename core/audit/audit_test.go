package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func readEntries(t *testing.T, path string) []Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("invalid JSON line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func TestFieldsAndModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Entry{Event: SecurityViolation, Severity: Critical, SessionID: "s1", UserID: "u", Success: false,
		Details: map[string]any{"rule": "privileged"}, Error: "refused"})
	l.Close()
	es := readEntries(t, path)
	if len(es) != 1 {
		t.Fatalf("want 1 entry, got %d", len(es))
	}
	e := es[0]
	if _, err := time.Parse(time.RFC3339, e.Timestamp); err != nil || !strings.HasSuffix(e.Timestamp, "Z") {
		t.Errorf("timestamp %q not RFC 3339 UTC", e.Timestamp)
	}
	if e.Event != SecurityViolation || e.Severity != Critical || e.SessionID != "s1" || e.Error != "refused" || e.Details["rule"] != "privileged" {
		t.Errorf("entry %+v", e)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		st, _ := os.Stat(p)
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, st.Mode().Perm(), want)
		}
	}
}

func TestConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, _ := Open(path, 0, 0)
	var wg sync.WaitGroup
	const writers, each = 32, 200
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				l.Record(Entry{Event: ContainerCreate, Success: true, Details: map[string]any{"w": w, "i": i, "pad": strings.Repeat("x", 300)}})
			}
		}(w)
	}
	wg.Wait()
	l.Close()
	if n := len(readEntries(t, path)); n != writers*each {
		t.Fatalf("want %d entries, got %d", writers*each, n)
	}
}

func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, _ := Open(path, 2000, 2)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				l.Record(Entry{Event: ExecutionRequest, Details: map[string]any{"i": i}})
			}
		}()
	}
	wg.Wait()
	l.Close()
	for _, p := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s missing: %v", p, err)
		}
		if st.Size() > 2000 {
			t.Errorf("%s is %d bytes, over the 2000 limit", p, st.Size())
		}
		readEntries(t, p) // every file holds whole JSON lines
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("more rotated files kept than audit_keep")
	}
}

func TestRedaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, _ := Open(path, 0, 0)
	code := "import os; print('PLANTED-CODE-7731')"
	l.Record(Entry{Event: ExecutionRequest, Details: map[string]any{
		"code": code,
		"env":  map[string]string{"GITHUB_TOKEN": "PLANTED-SECRET-1", "MODE": "fast"},
		"nested": map[string]any{"password": "PLANTED-SECRET-2", "api_key": "PLANTED-SECRET-3",
			"list": []any{map[string]any{"secret": "PLANTED-SECRET-4"}}},
		"file_content": "PLANTED-FILE-CONTENT",
		"image":        "mcp-forge/python:3.11",
	}})
	l.Close()
	raw, _ := os.ReadFile(path)
	for _, planted := range []string{"PLANTED-CODE", "PLANTED-SECRET", "PLANTED-FILE"} {
		if strings.Contains(string(raw), planted) {
			t.Errorf("log contains %s:\n%s", planted, raw)
		}
	}
	for _, want := range []string{HashCode(code), `"MODE":"fast"`, "mcp-forge/python:3.11"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("log lacks %s:\n%s", want, raw)
		}
	}
}

func ExampleHashCode() {
	fmt.Println(HashCode("print(1)")[:16])
	// Output: d287bb7f9d15abdc
}

// Hooks see every entry after redaction and may add the tenant.
func TestHooks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var seen []Entry
	l.AddHook(func(e *Entry) {
		if e.UserID == "" {
			e.UserID = "alice"
		}
	})
	l.AddHook(func(e *Entry) { seen = append(seen, *e) })
	l.Record(Entry{Event: ContainerStart, Details: map[string]any{"code": "print(1)"}})
	l.Record(Entry{Event: ContainerStop, UserID: "bob"})
	got := readEntries(t, path)
	if len(got) != 2 || got[0].UserID != "alice" || got[1].UserID != "bob" {
		t.Fatalf("written: %+v", got)
	}
	if len(seen) != 2 || seen[0].Details["code"] != nil || seen[0].Details["code_sha256"] == nil {
		t.Fatalf("hook saw unredacted or missing entries: %+v", seen)
	}
}
