package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// workspace is a temporary workspace with files, a directory, planted
// links (to a secret outside it, to a directory outside, to a file
// inside), a FIFO, a device where the test may make one, and a name with a
// newline; and the file service of it.
func workspace(t *testing.T) (*Files, string, string) {
	t.Helper()
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, "sub", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "secret"), "SECRET")
	write(filepath.Join(ws, "a.txt"), "hello")
	write(filepath.Join(ws, "sub", "b.bin"), strings.Repeat("b", 100))
	write(filepath.Join(ws, "sub", "deep", "c"), "c")
	write(filepath.Join(ws, "new\nline"), "nl")
	for name, target := range map[string]string{"secret": filepath.Join(outside, "secret"), "out": outside, "inside": "a.txt", "rel": "../outside/secret"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = unix.Mknod(filepath.Join(ws, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) // root only
	f, err := OpenFiles(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, ws, outside
}

func TestReadRefusals(t *testing.T) {
	f, ws, _ := workspace(t)
	long := strings.Repeat("n", 300)
	cases := []struct {
		path string
		max  int64
		code Code
		data string
	}{
		{"a.txt", 10, OK, "hello"},
		{"./sub/../a.txt", 10, OK, "hello"},
		{"new\nline", 10, OK, "nl"},
		{"a.txt", 4, TooLarge, ""},
		{"../outside/secret", 100, BadPath, ""},
		{"sub/../../outside/secret", 100, BadPath, ""},
		{"/etc/passwd", 100, BadPath, ""},
		{ws + "/a.txt", 100, BadPath, ""},
		{"secret", 100, Link, ""},     // a link to outside, at the last component
		{"inside", 100, Link, ""},     // even to a file inside
		{"rel", 100, Link, ""},        // a relative one
		{"out/secret", 100, Link, ""}, // a link on the way
		{"fifo", 100, NotRegular, ""}, // refused, not waited on
		{"sub", 100, NotRegular, ""},
		{"nope", 100, NoFile, ""},
		{"a.txt/x", 100, NoFile, ""},
		{"a\x00b", 100, NoFile, ""},
		{long, 100, BadPath, ""},                             // a name over NAME_MAX
		{strings.Repeat("d/", 2100), 100, BadPath, ""},       // a path over MaxPath
		{strings.Repeat("sub/", 900) + "x", 100, NoFile, ""}, // deep, within MaxPath
	}
	if _, err := os.Stat(filepath.Join(ws, "null")); err == nil {
		cases = append(cases, struct {
			path string
			max  int64
			code Code
			data string
		}{"null", 100, NotRegular, ""})
	}
	for _, c := range cases {
		res, data := f.Do(Request{Op: OpRead, Path: c.path, Max: c.max}, nil)
		if res.Code != c.code || string(data) != c.data {
			t.Errorf("read %.40q: code %d %q, data %q; want code %d, data %q", c.path, res.Code, res.Error, data, c.code, c.data)
		}
		if res.Code == OK {
			continue
		}
		if st, _ := f.Do(Request{Op: OpStat, Path: c.path}, nil); st.Code == OK && c.code != TooLarge {
			t.Errorf("stat %.40q answered a size (%d) where read refused", c.path, st.Size)
		}
	}
}

func TestWriteRefusals(t *testing.T) {
	f, ws, outside := workspace(t)
	ok := func(p string, replace bool) {
		t.Helper()
		if res, _ := f.Do(Request{Op: OpWrite, Path: p, Replace: replace}, []byte("new")); res.Code != OK {
			t.Fatalf("write %q: %d %s", p, res.Code, res.Error)
		}
	}
	ok("a.txt", false)
	ok("made/on/the/way.txt", false)
	if b, _ := os.ReadFile(filepath.Join(ws, "made/on/the/way.txt")); string(b) != "new" {
		t.Fatalf("the file written is %q", b)
	}
	for _, c := range []struct {
		path string
		code Code
	}{
		{"secret", Link},          // never through a link
		{"out/secret", Link},      // nor beneath one
		{"out/new", Link},         // nor creating beneath one
		{"../outside/x", BadPath}, // nor outside
		{"/tmp/x", BadPath},       // nor absolute
		{".", NotRegular},         // nor the workspace itself
		{"sub", Failed},           // a directory is not replaced
		{strings.Repeat("x", 300), BadPath},
	} {
		if res, _ := f.Do(Request{Op: OpWrite, Path: c.path}, []byte("pwned")); res.Code != c.code {
			t.Errorf("write %.40q: code %d %q; want %d", c.path, res.Code, res.Error, c.code)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Fatalf("a write reached outside the workspace: %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("a write created a file outside the workspace")
	}
	// Replace: the link itself is replaced by a file, its target untouched.
	ok("secret", true)
	if st, _ := os.Lstat(filepath.Join(ws, "secret")); st == nil || !st.Mode().IsRegular() {
		t.Fatalf("the link was not replaced: %v", st)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "SECRET" {
		t.Fatalf("replacing a link wrote through it: %q", b)
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(ws)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".forge-") {
			t.Errorf("a temporary file left: %s", e.Name())
		}
	}
}

func TestRemove(t *testing.T) {
	f, ws, outside := workspace(t)
	for _, c := range []struct {
		path string
		code Code
	}{
		{"sub", NotRegular}, {"nope", NoFile}, {"out/secret", Link}, {"../outside/secret", BadPath},
		{"secret", OK}, // the link, not its target
		{"a.txt", OK},
	} {
		if res, _ := f.Do(Request{Op: OpRemove, Path: c.path}, nil); res.Code != c.code {
			t.Errorf("remove %q: %d %s; want %d", c.path, res.Code, res.Error, c.code)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatal("removing a link removed its target")
	}
	if _, err := os.Lstat(filepath.Join(ws, "a.txt")); err == nil {
		t.Fatal("a.txt is still there")
	}
}

func TestList(t *testing.T) {
	f, _, _ := workspace(t)
	res, _ := f.Do(Request{Op: OpList, Path: ".", Max: 100}, nil)
	if res.Code != OK || res.More {
		t.Fatalf("list: %+v", res)
	}
	got := map[string]string{}
	for _, e := range res.Entries {
		got[e.Path] = e.Type
	}
	for p, k := range map[string]string{"a.txt": "file", "sub": "directory", "sub/b.bin": "file", "sub/deep/c": "file", "secret": "symlink", "out": "symlink", "fifo": "fifo", "new\nline": "file"} {
		if got[p] != k {
			t.Errorf("%q listed as %q; want %q", p, got[p], k)
		}
	}
	if _, ok := got["out/secret"]; ok {
		t.Error("the listing followed a link to a directory outside")
	}
	for _, c := range []struct {
		path string
		code Code
	}{{"a.txt", NotDir}, {"out", Link}, {"out/x", Link}, {"nope", NoFile}, {"..", BadPath}, {"fifo", NotDir}} {
		if res, _ := f.Do(Request{Op: OpList, Path: c.path, Max: 10}, nil); res.Code != c.code {
			t.Errorf("list %q: %d %s; want %d", c.path, res.Code, res.Error, c.code)
		}
	}
	// Bounded: max entries, then More.
	res, _ = f.Do(Request{Op: OpList, Path: ".", Max: 2}, nil)
	if len(res.Entries) != 2 || !res.More {
		t.Fatalf("list with max 2: %d entries, more %v", len(res.Entries), res.More)
	}
}

// A directory of many names is read only up to its name budget.
func TestListNameBudget(t *testing.T) {
	f, ws, _ := workspace(t)
	many := filepath.Join(ws, "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 1100 {
		if err := os.WriteFile(filepath.Join(many, strings.Repeat("x", 200)+"-"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := f.Do(Request{Op: OpList, Path: "many", Max: 1}, nil)
	if res.Code != OK || len(res.Entries) != 1 || !res.More {
		t.Fatalf("list of 1100 names with max 1: %d entries, more %v", len(res.Entries), res.More)
	}
}

func TestReadDir(t *testing.T) {
	f, ws, _ := workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "sub", "big"), bytes.Repeat([]byte("B"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "..", "outside", "secret"), filepath.Join(ws, "sub", "lnk")); err != nil {
		t.Fatal(err)
	}
	res, data := f.Do(Request{Op: OpReadDir, Path: "sub", Max: 500, MaxTotal: 10000}, nil)
	if res.Code != OK {
		t.Fatalf("readdir: %+v", res)
	}
	want := []FileData{{Name: "b.bin", Size: 100, Data: true}, {Name: "big", Size: 1000}}
	if len(res.Files) != len(want) || res.Files[0] != want[0] || res.Files[1] != want[1] || len(data) != 100 {
		t.Fatalf("readdir: %+v, %d bytes; want %+v (no link, no directory; big over the file cap)", res.Files, len(data), want)
	}
	for _, c := range []struct {
		path string
		code Code
	}{{"out", Link}, {"nope", NoFile}, {"a.txt", NoFile}} { // no directory: no files
		if res, _ := f.Do(Request{Op: OpReadDir, Path: c.path, Max: 10, MaxTotal: 10}, nil); res.Code != c.code {
			t.Errorf("readdir %q: %d; want %d", c.path, res.Code, c.code)
		}
	}
}

func TestStatfsAndLogs(t *testing.T) {
	base := t.TempDir()
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "run")
	_ = os.Mkdir(ws, 0o755)
	_ = os.Mkdir(out, 0o755)
	_ = os.WriteFile(filepath.Join(out, "stdout"), []byte("out!"), 0o644)
	_ = os.WriteFile(filepath.Join(out, "stderr"), []byte("err"), 0o644)
	_ = os.WriteFile(filepath.Join(out, "totals"), []byte("10 3\n"), 0o644)
	f, err := OpenFiles(ws, out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, _ := f.Do(Request{Op: OpStatfs}, nil)
	if res.Code != OK || res.Statfs == nil || res.Statfs.BlockSize <= 0 || res.Statfs.Blocks == 0 {
		t.Fatalf("statfs: %+v", res)
	}
	res, data := f.Do(Request{Op: OpLogs, Max: 3}, nil)
	if res.Logs == nil || *res.Logs != (Logs{StdoutTotal: 10, StderrTotal: 3, Stdout: 3}) || string(data) != "outerr" {
		t.Fatalf("logs: %+v %q", res.Logs, data)
	}
}

// The service over its frames: requests in turn, a bad frame ends it.
func TestServeFrames(t *testing.T) {
	f, _, _ := workspace(t)
	var in, out bytes.Buffer
	for _, r := range []Request{{Op: OpRead, Path: "a.txt", Max: 10}, {Op: OpWrite, Path: "w"}, {Op: OpRead, Path: "w", Max: 10}} {
		if err := WriteMsg(&in, r, []byte("data")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Serve(&in, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hello", "", "data"} {
		var res Response
		data, err := ReadMsg(&out, &res, 1<<20)
		if err != nil || res.Code != OK || string(data) != want {
			t.Fatalf("answer %+v %q, %v; want %q", res, data, err, want)
		}
	}
	// A frame claiming more than the bound is refused before it is read.
	bad := []byte{0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, '{', '}'}
	if err := f.Serve(bytes.NewReader(bad), &out); err == nil {
		t.Fatal("a frame over its bound was served")
	}
	if _, err := ReadMsg(bytes.NewReader(bad), &Response{}, 1<<20); err == nil {
		t.Fatal("the client read a frame over its bound")
	}
}
