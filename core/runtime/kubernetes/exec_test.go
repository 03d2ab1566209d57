package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/core/runtime/agent"
	"github.com/mcp-forge/mcp-forge/core/runtime/kubernetes/podspec"
)

// Exec's command gets its environment and working directory, its exit
// code and its two streams come back apart, without the agent exec's marker.
func TestExec(t *testing.T) {
	script := `printf '%s|%s|%s\n' "$A" "$B" "$(pwd)"; printf 'to stderr' >&2; exit 7`
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16) // 100 KB of stdin
	cases := []struct {
		name                 string
		req                  runtime.ExecRequest
		code                 int
		stdout, stderr       string // "" with stdoutTotal: the bytes are checked by length
		stdoutTotal, errTotl int64
	}{
		{"env, workdir, exit code", runtime.ExecRequest{Command: []string{"sh", "-c", script}, Env: map[string]string{"A": "1", "B": "x=y z"}, WorkDir: "/forge/code", Max: 1 << 20},
			7, "1|x=y z|{ws}/code\n", "to stderr", 0, 0}, // the sandbox's /forge/code is the workspace's code
		{"no workdir", runtime.ExecRequest{Command: []string{"sh", "-c", "echo ok"}, Max: 1 << 20}, 0, "ok\n", "", 0, 0},
		{"missing workdir", runtime.ExecRequest{Command: []string{"true"}, WorkDir: "/work/nope", Max: 1 << 20}, 126, "", "cd {ws}/out/nope: No such file or directory\n", 0, 0},
		{"missing command", runtime.ExecRequest{Command: []string{"no-such-command"}, Max: 1 << 20}, 127, "", "exec no-such-command: No such file or directory\n", 0, 0},
		{"capped", runtime.ExecRequest{Command: []string{"sh", "-c", "printf abcdefgh; printf 12345 >&2"}, Max: 3}, 0, "abc", "123", 8, 5},
		{"stdin", runtime.ExecRequest{Command: []string{"cat"}, Stdin: big, Max: 1 << 20}, 0, string(big), "", 0, 0},
		{"empty stdin", runtime.ExecRequest{Command: []string{"wc", "-c"}, Stdin: []byte{}, Max: 1 << 20}, 0, "0\n", "", 0, 0},
		{"signalled", runtime.ExecRequest{Command: []string{"sh", "-c", "kill -KILL $$"}, Max: 1 << 20}, 137, "", "", 0, 0},
	}
	for _, proto := range []string{"websocket", "spdy"} {
		t.Run(proto, func(t *testing.T) {
			cl := newCluster(t, testKube())
			cl.spdyOnly.Store(proto == "spdy")
			id := cl.started(t, specIn(hostWorkspace(t)))
			ws := cl.ws(id)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					var live bytes.Buffer
					req := tc.req
					req.Stdout = &live
					res, err := cl.c.Exec(context.Background(), id, req)
					if err != nil {
						t.Fatalf("Exec: %v", err)
					}
					wantOut := strings.ReplaceAll(tc.stdout, "{ws}", ws)
					wantErr := strings.ReplaceAll(tc.stderr, "{ws}", ws)
					if res.ExitCode != tc.code || string(res.Stdout) != wantOut || string(res.Stderr) != wantErr || res.TimedOut {
						t.Errorf("Exec: exit %d, stdout %.80q, stderr %q, timed out %v; want exit %d, %.80q, %q", res.ExitCode, res.Stdout, res.Stderr, res.TimedOut, tc.code, wantOut, wantErr)
					}
					if tc.stdoutTotal > 0 && (res.StdoutTotal != tc.stdoutTotal || res.StderrTotal != tc.errTotl) {
						t.Errorf("totals %d %d; want %d %d", res.StdoutTotal, res.StderrTotal, tc.stdoutTotal, tc.errTotl)
					}
					if !strings.HasPrefix(live.String(), string(res.Stdout)) || int64(live.Len()) != res.StdoutTotal {
						t.Errorf("the live stdout writer got %d bytes, the result %d of %d", live.Len(), len(res.Stdout), res.StdoutTotal)
					}
					if bytes.Contains(res.Stderr, []byte(execMark)) {
						t.Errorf("the agent exec's marker left in stderr: %q", res.Stderr)
					}
				})
			}
			for _, c := range cl.served() {
				if c.Protocol != proto {
					t.Errorf("%v came over %s, want %s", c.Command, c.Protocol, proto)
				}
			}
		})
	}
}

func (cl *cluster) killsSent(pod, sig string) int {
	n := 0
	for _, c := range cl.served() {
		if args, ok := killArgs(c.Command); ok && c.Pod == pod && args[0] == sig && strings.HasPrefix(args[1], "-") && args[1] != "-1" {
			n++
		}
	}
	return n
}

// Past its timeout an exec's process group gets SIGTERM, then SIGKILL
// runtime.ExecKillGrace later, and the result says it timed out.
func TestExecTimeout(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	const timeout = 300 * time.Millisecond
	cases := []struct {
		name         string
		script       string
		code         int
		terms, kills int
		least, most  time.Duration
	}{
		// sh and its sleep are one group: SIGTERM ends both.
		{"ends at SIGTERM", "sleep 60", 143, 1, 0, timeout, timeout + time.Second},
		// An ignored SIGTERM is inherited by sleep: SIGKILL it is.
		{"ignores SIGTERM", "trap '' TERM; sleep 60; echo survived", 137, 1, 1, timeout + runtime.ExecKillGrace, timeout + runtime.ExecKillGrace + time.Second},
		{"ends in time", "exit 4", 4, 0, 0, 0, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			terms, kills := cl.killsSent(id, "TERM"), cl.killsSent(id, "KILL")
			t0 := time.Now()
			res, err := cl.c.Exec(context.Background(), id, runtime.ExecRequest{Command: []string{"sh", "-c", tc.script}, Max: 1 << 10, Timeout: timeout})
			d := time.Since(t0)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if res.ExitCode != tc.code || res.TimedOut != (tc.terms > 0) || len(res.Stdout) != 0 {
				t.Errorf("exit %d, timed out %v, stdout %q; want exit %d, timed out %v", res.ExitCode, res.TimedOut, res.Stdout, tc.code, tc.terms > 0)
			}
			if d < tc.least || d > tc.most {
				t.Errorf("took %s; want %s..%s", d, tc.least, tc.most)
			}
			if got := cl.killsSent(id, "TERM") - terms; got != tc.terms {
				t.Errorf("%d SIGTERMs to the process group; want %d", got, tc.terms)
			}
			if got := cl.killsSent(id, "KILL") - kills; got != tc.kills {
				t.Errorf("%d SIGKILLs to the process group; want %d", got, tc.kills)
			}
			waitFor(t, "the exec's processes gone", 5*time.Second, func() bool { return cl.live(id) == 0 })
		})
	}
}

// The caller's context ending ends the stream at once.
func TestExecCancel(t *testing.T) {
	for _, proto := range []string{"websocket", "spdy"} {
		t.Run(proto, func(t *testing.T) {
			cl := newCluster(t, testKube())
			cl.spdyOnly.Store(proto == "spdy")
			id := cl.started(t, specIn(hostWorkspace(t)))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := async(func() error {
				_, err := cl.c.Exec(ctx, id, runtime.ExecRequest{Command: []string{"sleep", "60"}, Max: 1 << 10, Timeout: time.Minute})
				return err
			})
			waitFor(t, "the command runs", 5*time.Second, func() bool { return cl.live(id) == 1 })
			t0 := time.Now()
			cancel()
			err := returned(t, "Exec after its context was cancelled", 5*time.Second, done)
			if err == nil {
				t.Fatal("Exec whose context was cancelled succeeded")
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("Exec took %s to return after its context was cancelled", d)
			}
			if n := cl.killsSent(id, "TERM"); n != 0 {
				t.Errorf("a cancelled exec is not a timed-out one: %d SIGTERMs sent", n)
			}
		})
	}
}

// ReadDir lists the regular files of a directory within the caps; links
// and directories are not listed, a missing directory has no files.
func TestReadDir(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	out := cl.ws(id, "list")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"a": 10, "b": 10, "big": 100, "empty": 0} {
		if err := os.WriteFile(filepath.Join(out, name), bytes.Repeat([]byte{0, 'x'}, size/2), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(out, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	type f struct {
		name    string
		size    int64
		skipped bool
	}
	cases := []struct {
		name          string
		rel           string
		maxFile, maxT int64
		want          []f
	}{
		{"all fit", "list", 1000, 1000, []f{{"a", 10, false}, {"b", 10, false}, {"big", 100, false}, {"empty", 0, false}}},
		{"file cap", "list", 50, 1000, []f{{"a", 10, false}, {"b", 10, false}, {"big", 100, true}, {"empty", 0, false}}},
		{"total cap", "list", 1000, 15, []f{{"a", 10, false}, {"b", 10, true}, {"big", 100, true}, {"empty", 0, false}}},
		{"missing directory", "nope", 1000, 1000, nil},
		{"a file, not a directory", "a.txt", 1000, 1000, nil},
	}
	if err := os.Symlink("list", cl.ws(id, "list-link")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.ReadDir(context.Background(), id, "../../../etc", 1000, 1000); !errors.Is(err, runtime.ErrPath) {
		t.Errorf("ReadDir of a path leaving the workspace: %v; want ErrPath", err)
	}
	if _, err := cl.c.ReadDir(context.Background(), id, "list-link", 1000, 1000); !errors.Is(err, runtime.ErrLink) {
		t.Errorf("ReadDir through a link: %v; want ErrLink", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := cl.c.ReadDir(context.Background(), id, tc.rel, tc.maxFile, tc.maxT)
			if err != nil {
				t.Fatalf("ReadDir: %v", err)
			}
			var got []f
			for _, file := range files {
				got = append(got, f{file.Name, file.Size, file.Skipped})
				want := bytes.Repeat([]byte{0, 'x'}, int(file.Size)/2)
				if !file.Skipped && !bytes.Equal(file.Data, want) {
					t.Errorf("%s: data %q; want %q", file.Name, file.Data, want)
				}
				if file.Skipped && len(file.Data) != 0 {
					t.Errorf("%s was skipped but has data", file.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ReadDir(%s, %d, %d) = %v; want %v", tc.rel, tc.maxFile, tc.maxT, got, tc.want)
			}
		})
	}
}

// ReadFile reads a regular file within its cap and never follows a link;
// WriteFile replaces a file whole, making its directories.
func TestReadWriteFile(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	id := cl.started(t, specIn(hostWorkspace(t)))
	for link, to := range map[string]string{"rel-link": "a.txt", "dlink": "sub"} {
		if err := os.Symlink(to, cl.ws(id, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(cl.ws(id, "fifo-in-pod"), 0o600); err != nil {
		t.Fatal(err)
	}
	reads := []struct {
		name, rel string
		max       int64
		want      string
		err       error
	}{
		{"a file", "a.txt", 100, "alpha", nil},
		{"binary", "sub/b.bin", 100, "\x00\x01binary\xff", nil},
		{"at its cap", "a.txt", 5, "alpha", nil},
		{"over its cap", "a.txt", 4, "", runtime.ErrTooLarge},
		{"missing", "nope", 100, "", runtime.ErrNoFile},
		{"a directory", "sub", 100, "", runtime.ErrNotRegular},
		{"a link", "link", 100, "", runtime.ErrLink},
		{"another link", "rel-link", 100, "", runtime.ErrLink},
		{"through a linked directory", "dlink/b.bin", 100, "", runtime.ErrLink},
		{"a fifo", "fifo-in-pod", 100, "", runtime.ErrNotRegular},
		{"dot-dot leaving the workspace", "../../../../etc/hostname", 1 << 20, "", runtime.ErrPath},
		{"dot-dot after a directory", "sub/../../x", 1 << 20, "", runtime.ErrPath},
		{"absolute", "/etc/hostname", 1 << 20, "", runtime.ErrPath},
		{"a NUL", "a.txt\x00.png", 100, "", runtime.ErrNoFile},
	}
	for _, tc := range reads {
		t.Run("read "+tc.name, func(t *testing.T) {
			got, err := cl.c.ReadFile(ctx, id, tc.rel, tc.max)
			if !errors.Is(err, tc.err) || string(got) != tc.want {
				t.Errorf("ReadFile(%q, %d) = %q, %v; want %q, %v", tc.rel, tc.max, got, err, tc.want, tc.err)
			}
		})
	}
	writes := []struct {
		name, rel string
		data      []byte
	}{
		{"new file in new directories", "out/deep/er/new.txt", []byte("new")},
		{"replace", "a.txt", []byte("replaced")},
		{"empty", "out/empty", nil},
		{"binary", "out/bin", []byte{0, 1, 2, 255, '\n', 0}},
	}
	for _, tc := range writes {
		t.Run("write "+tc.name, func(t *testing.T) {
			if err := cl.c.WriteFile(ctx, id, tc.rel, tc.data, false); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			got, err := os.ReadFile(cl.ws(id, tc.rel))
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Errorf("%s in the pod: %q, %v; want %q", tc.rel, got, err, tc.data)
			}
			if _, err := os.Stat(cl.ws(id, tc.rel) + ".forge-tmp"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the temporary file is left: %v", err)
			}
			back, err := cl.c.ReadFile(ctx, id, tc.rel, 1<<20)
			if err != nil || !bytes.Equal(back, tc.data) {
				t.Errorf("ReadFile after WriteFile: %q, %v", back, err)
			}
		})
	}
	// A write to a link, or through one, is refused and nothing is written;
	// asked to replace a link at its path, a write replaces the link, never
	// writing through it, and still refuses a link above it.
	refused := []struct {
		rel     string
		replace bool
	}{{"rel-link", false}, {"dlink/new.txt", false}, {"dlink/new.txt", true}}
	for _, tc := range refused {
		if err := cl.c.WriteFile(ctx, id, tc.rel, []byte("over"), tc.replace); !errors.Is(err, runtime.ErrLink) {
			t.Errorf("WriteFile(%s, replace link %v): %v; want ErrLink", tc.rel, tc.replace, err)
		}
	}
	if _, err := os.Lstat(cl.ws(id, "sub", "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a write through a linked directory landed in its target: %v", err)
	}
	if err := cl.c.WriteFile(ctx, id, "rel-link", []byte("over"), true); err != nil {
		t.Errorf("WriteFile replacing a link: %v", err)
	}
	if a, _ := os.ReadFile(cl.ws(id, "a.txt")); string(a) != "replaced" {
		t.Errorf("a write to a link changed its target: a.txt is %q", a)
	}
	if fi, err := os.Lstat(cl.ws(id, "rel-link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("rel-link after a replacing write: %v, %v; want a regular file", fi, err)
	}
	// A write that fails leaves no temporary file: a directory where the file should be.
	if err := cl.c.WriteFile(ctx, id, "sub", []byte("x"), false); err == nil {
		t.Error("WriteFile over a directory succeeded")
	}
	if _, err := os.Lstat(cl.ws(id, "sub.forge-tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed write left its temporary file: %v", err)
	}
}

// echoServer listens on a unix socket in the pod's workspace: it reads
// until the client half-closes, then answers what it read and closes.
func echoServer(t *testing.T, path string) <-chan string {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen on %s: %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c) // returns at the client's half-close
		if err != nil {
			got <- "read: " + err.Error()
			return
		}
		got <- string(b)
		c.Write(append([]byte("echo:"), b...))
	}()
	return got
}

// DialSocket reaches a socket in the pod through the keeper: a round trip
// with a half-close each way, and ErrNoListener where nothing listens.
func TestDialSocket(t *testing.T) {
	for _, proto := range []string{"websocket", "spdy"} {
		t.Run(proto, func(t *testing.T) {
			cl := newCluster(t, testKube())
			cl.spdyOnly.Store(proto == "spdy")
			ctx := context.Background()
			id := cl.started(t, specIn(hostWorkspace(t)))
			sock := cl.ws(id, "chan", "runner.sock")
			if len(sock) > 100 {
				t.Skipf("socket path %s is too long for a unix socket here", sock)
			}
			seen := echoServer(t, sock)

			conn, err := cl.c.DialSocket(ctx, id, "/forge/chan/runner.sock")
			if err != nil {
				t.Fatalf("DialSocket: %v", err)
			}
			defer conn.Close()
			msg := bytes.Repeat([]byte("ping\x00"), 20000) // 100 KB, binary
			if _, err := conn.Write(msg); err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
				t.Fatalf("CloseWrite: %v", err)
			}
			if got := returned(t, "the server seeing the half-close", 5*time.Second, seen); got != string(msg) {
				t.Fatalf("the server read %d bytes (%.40q); want the %d sent", len(got), got, len(msg))
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			back, err := io.ReadAll(conn) // ends when the server closes: its half-close reaches us
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if want := append([]byte("echo:"), msg...); !bytes.Equal(back, want) {
				t.Errorf("read back %d bytes; want %d", len(back), len(want))
			}
			waitFor(t, "the relay ends with the connection", 5*time.Second, func() bool { return cl.live(id) == 0 })

			cases := []struct {
				name, target string
				want         error
				says         string
			}{
				{"nothing listens", "/forge/chan/none.sock", runtime.ErrNoListener, ""},
				{"no such directory", "/forge/chan/sub/none.sock", runtime.ErrNoListener, ""},
				{"under no mount", "/run/other.sock", nil, "under no mount"},
				{"under a read-only mount", "/forge/code/x.sock", nil, "under no mount"},
			}
			for _, tc := range cases {
				_, err := cl.c.DialSocket(ctx, id, tc.target)
				if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("%s: DialSocket(%s): %v; want %v %q", tc.name, tc.target, err, tc.want, tc.says)
				}
			}
			if _, err := cl.c.DialSocket(ctx, "forge-unknown", "/forge/chan/runner.sock"); !errors.Is(err, ErrNotOurs) {
				t.Errorf("DialSocket to a pod not ours: %v; want ErrNotOurs", err)
			}
		})
	}
}

func TestSocketPlace(t *testing.T) {
	mounts := []podspec.Mount{{Target: "/work", Rel: "."}, {Target: "/work/chan", Rel: "chan"}, {Target: "/forge/code", Rel: "code", ReadOnly: true}, {Target: "/run/forge/", Rel: "k"}}
	cases := []struct {
		target, want string
		ok           bool
	}{
		{"/work/x.sock", "x.sock", true},
		{"/work/chan/runner.sock", "chan/runner.sock", true}, // the longest mount wins
		{"/work/chan", "chan", true},
		{"/run/forge/kernel-1", "k/kernel-1", true},
		{"/forge/code/x.sock", "", false}, // read-only: no socket of the sandbox's
		{"/workspace/x.sock", "", false},
		{"/elsewhere", "", false},
	}
	for _, tc := range cases {
		got, ok := socketPlace(mounts, tc.target)
		if got != tc.want || ok != tc.ok {
			t.Errorf("socketPlace(%s) = %q, %v; want %q, %v", tc.target, got, ok, tc.want, tc.ok)
		}
	}
}

// Signal goes to the sandbox's init (pid 1 in the pod); an init that is
// not there is an error with what the pod said.
func TestSignal(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	err := cl.c.Signal(context.Background(), id, "sigterm")
	if err == nil || !strings.Contains(err.Error(), "signal TERM to pod "+id+": exit 1") || !strings.Contains(err.Error(), "No such process") {
		t.Errorf("Signal with no init in the fake pod: %v; want its exit and stderr", err)
	}
	if !slices.ContainsFunc(cl.served(), func(c served) bool {
		args, ok := killArgs(c.Command)
		return ok && c.Container == podspec.Sandbox && slices.Equal(args, []string{"TERM", "1"})
	}) {
		t.Errorf("Signal did not send TERM to the sandbox's pid 1; served %+v", cl.served())
	}
	// SIGKILL cannot reach a PID 1 from inside: every other process gets it.
	done := async(func() error {
		_, err := cl.c.Exec(context.Background(), id, runtime.ExecRequest{Command: []string{"sleep", "60"}, Max: 10})
		return err
	})
	waitFor(t, "the command runs", 5*time.Second, func() bool { return cl.live(id) == 1 })
	if err := cl.c.Signal(context.Background(), id, "KILL"); err != nil {
		t.Errorf("Signal KILL: %v", err)
	}
	if err := returned(t, "the killed exec", 5*time.Second, done); err != nil {
		t.Errorf("the killed exec: %v", err)
	}
	if !slices.ContainsFunc(cl.served(), func(c served) bool { return slices.Equal(c.Command, killCmd("KILL", -1)) }) {
		t.Errorf("Signal KILL did not send %v", killCmd("KILL", -1))
	}
}

// ListFiles walks a directory depth first in name order without following
// links, up to max entries, and says when it stopped there.
func TestListFiles(t *testing.T) {
	cl := newCluster(t, testKube())
	ctx := context.Background()
	id := cl.started(t, specIn(hostWorkspace(t)))
	type e struct {
		path, typ string
		size      int64
	}
	entries := func(es []runtime.Entry) []e {
		var out []e
		for _, x := range es {
			out = append(out, e{x.Path, x.Type, x.Size})
		}
		return out
	}
	if err := os.Symlink("a.txt", cl.ws(id, "sub", "l")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(cl.ws(id, "sub", "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cl.ws(id, "sub", "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cl.ws(id, "sub", "d", "e", "f"), []byte("123"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, rel string
		max       int
		want      []e
		more      bool
		err       error
	}{
		{"a tree", "sub", 100, []e{{"sub/b.bin", "file", 9}, {"sub/d", "directory", 0}, {"sub/d/e", "directory", 0}, {"sub/d/e/f", "file", 3}, {"sub/l", "symlink", 0}, {"sub/p", "fifo", 0}}, false, nil},
		{"cut at max", "sub", 3, []e{{"sub/b.bin", "file", 9}, {"sub/d", "directory", 0}, {"sub/d/e", "directory", 0}}, true, nil},
		{"missing", "nope", 100, nil, false, runtime.ErrNoFile},
		{"a file", "a.txt", 100, nil, false, runtime.ErrNotRegular},
		{"through a link", "link", 100, nil, false, runtime.ErrLink},
		{"dot-dot", "..", 100, nil, false, runtime.ErrPath},
		{"dot-dot after a directory", "sub/../..", 100, nil, false, runtime.ErrPath},
		{"absolute", "/", 100, nil, false, runtime.ErrPath},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, more, err := cl.c.ListFiles(ctx, id, tc.rel, tc.max)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("ListFiles(%s): %v; want %v", tc.rel, err, tc.err)
			}
			if !slices.Equal(entries(got), tc.want) || more != tc.more {
				t.Errorf("ListFiles(%s, %d) = %v, more %v; want %v, more %v", tc.rel, tc.max, entries(got), more, tc.want, tc.more)
			}
			for _, x := range got {
				if x.Modified.IsZero() || x.Ino == 0 {
					t.Errorf("%s has no mtime or inode: %+v", x.Path, x)
				}
			}
		})
	}
}

// BenchmarkExec is one Exec round trip through the in-process API server
// (the kubelet's streaming server, the agent's exec and `true` on this host).
func BenchmarkExec(b *testing.B) {
	for _, proto := range []string{"websocket", "spdy"} {
		b.Run(proto, func(b *testing.B) {
			cl := newCluster(b, testKube())
			cl.spdyOnly.Store(proto == "spdy")
			id := cl.started(b, specIn(hostWorkspace(b)))
			b.ResetTimer()
			for range b.N {
				if res, err := cl.c.Exec(context.Background(), id, runtime.ExecRequest{Command: []string{"true"}, Stdin: []byte("x"), Max: 10}); err != nil || res.ExitCode != 0 {
					b.Fatalf("Exec: %+v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkKeep is one file-service request (a listing of a workspace
// directory) on an open keeper: what a session's execute pays after its
// run to see what it wrote.
func BenchmarkKeep(b *testing.B) {
	cl := newCluster(b, testKube())
	id := cl.started(b, specIn(hostWorkspace(b)))
	if _, _, err := cl.c.ListFiles(context.Background(), id, "sub", 100); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, _, err := cl.c.ListFiles(context.Background(), id, "sub", 100); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKeepService: the file service answers a refusal or an unknown
// operation with its code, and goes on serving after either.
func TestKeepService(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	ctx := context.Background()
	res, _, err := cl.c.keep(ctx, id, agent.Request{Op: "nope"}, nil)
	if err != nil || res.Code != agent.Failed || !strings.Contains(res.Error, "nope") {
		t.Fatalf("unknown operation: %+v, %v", res, err)
	}
	res, _, err = cl.c.keep(ctx, id, agent.Request{Op: agent.OpList, Path: "a.txt", Max: 10}, nil)
	if err != nil || res.Code != agent.NotDir {
		t.Fatalf("list of a file: %+v, %v; want NotDir", res, err)
	}
	res, _, err = cl.c.keep(ctx, id, agent.Request{Op: agent.OpList, Path: "link/x", Max: 10}, nil)
	if err != nil || res.Code != agent.Link {
		t.Fatalf("list through a link: %+v, %v; want Link", res, err)
	}
	res, _, err = cl.c.keep(ctx, id, agent.Request{Op: agent.OpRead, Path: "../etc/passwd", Max: 10}, nil)
	if err != nil || res.Code != agent.BadPath {
		t.Fatalf("a path leaving the workspace, past the core's check: %+v, %v; want BadPath", res, err)
	}
	// A time no int64 of nanoseconds holds (year 2300, within ext4's range;
	// os.Chtimes goes through UnixNano, which cannot say it) is clamped,
	// not a listing that cannot be parsed.
	far := []unix.Timespec{{Sec: 10413792000}, {Sec: 10413792000}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, cl.ws(id, "sub", "b.bin"), far, 0); err != nil {
		t.Fatal(err)
	}
	p, err := cl.c.info(id)
	if err != nil {
		t.Fatal(err)
	}
	first := p.keeper
	entries, _, err := cl.c.ListFiles(ctx, id, "sub", 100)
	if err != nil || len(entries) == 0 || entries[0].Path != "sub/b.bin" || entries[0].Modified.Year() < 2250 {
		t.Fatalf("a listing after them: %+v, %v", entries, err)
	}
	if p.keeper != first || first.Dead() {
		t.Fatal("the file service was started again: a refusal ended it")
	}
}

// WorkspaceUsage measures the pod's workspace filesystem through the
// keeper (stat -f), so that a fill is audited as on Podman.
func TestWorkspaceUsage(t *testing.T) {
	cl := newCluster(t, testKube())
	id := cl.started(t, specIn(hostWorkspace(t)))
	u, err := cl.c.WorkspaceUsage(context.Background(), id)
	if err != nil || u.Size <= 0 || u.Free < 0 || u.Free > u.Size {
		t.Fatalf("WorkspaceUsage: %+v, %v; want a filesystem's size and free bytes", u, err)
	}
	for _, c := range []struct {
		in   *agent.Statfs
		want runtime.FSUsage
		ok   bool
	}{
		{&agent.Statfs{BlockSize: 4096, Blocks: 2048, Avail: 10, Files: 100, FilesFree: 5}, runtime.FSUsage{Size: 8 << 20, Free: 40960}, true},
		{&agent.Statfs{BlockSize: 4096, Blocks: 2048, Avail: 10, Files: 100}, runtime.FSUsage{Size: 8 << 20, Free: 40960, NoInodes: true}, true},
		{&agent.Statfs{BlockSize: 4096, Blocks: 2048, Avail: 10}, runtime.FSUsage{Size: 8 << 20, Free: 40960}, true}, // no inode count (some filesystems)
		{&agent.Statfs{BlockSize: 0, Blocks: 2048}, runtime.FSUsage{}, false},
		{&agent.Statfs{BlockSize: 4096, Blocks: 1 << 62}, runtime.FSUsage{}, false},
		{&agent.Statfs{BlockSize: 4096, Blocks: 10, Avail: 11}, runtime.FSUsage{}, false},
		{nil, runtime.FSUsage{}, false},
	} {
		got, err := usageOf(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("usageOf(%+v) = %+v, %v; want %+v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
