package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The commands run as the binary does: this test binary re-executed as
// mcp-forge-agent (TestMain dispatches to Main), so exec, PID 1's re-exec
// and signals are the real ones.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == Binary {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// agentBin is a link named mcp-forge-agent to this test binary.
func agentBin(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), Binary)
	if err := os.Symlink(exe, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, env []string, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(agentBin(t), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func TestInit(t *testing.T) {
	out := t.TempDir()
	t0 := time.Now()
	code, _, _ := run(t, []string{"FORGE_LOG_MAX=5", "KUBERNETES_SERVICE_HOST=10.0.0.1", "KUBERNETES_PORT=tcp://10.0.0.1:443"}, nil,
		"init", out, "--", "sh", "-c", `echo hello world; echo oops >&2; env | grep -c ^KUBERNETES_ || true; tr '\0' '\n' </proc/$PPID/environ | grep -c ^KUBERNETES_; sleep 30 & exit 7`)
	if code != 7 {
		t.Fatalf("exit %d; want the command's 7", code)
	}
	// An orphan holding the output (sleep 30) does not hold the init: it
	// waits 2 s at most once the command is gone.
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("the init took %s: the orphan held it", d)
	}
	stdout, _ := os.ReadFile(filepath.Join(out, "stdout"))
	stderr, _ := os.ReadFile(filepath.Join(out, "stderr"))
	totals, _ := os.ReadFile(filepath.Join(out, "totals"))
	if string(stdout) != "hello" || string(stderr) != "oops\n" {
		t.Errorf("captured %q, %q; want the first 5 bytes of each", stdout, stderr)
	}
	// hello world\n 0\n 0\n: the init's own environment (after its
	// re-exec) and the command's hold no API server address.
	if string(totals) != "16 5\n" {
		t.Errorf("totals %q; want \"16 5\\n\"", totals)
	}
}

func TestInitSignalsAndMissingCommand(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command(agentBin(t), "init", out, "--", "sh", "-c", `trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(out, "stdout")); strings.Contains(string(b), "ready") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("after SIGTERM: %v; want the command's trap to exit 3", err)
	}
	code, _, _ := run(t, nil, nil, "init", out, "--", "no-such-command")
	stderr, _ := os.ReadFile(filepath.Join(out, "stderr"))
	if code != 127 || string(stderr) != "exec no-such-command: No such file or directory\n" {
		t.Fatalf("missing command: exit %d, %q", code, stderr)
	}
	code, _, _ = run(t, nil, nil, "init", out, "--", "sh", "-c", "kill -KILL $$")
	if code != 128+9 {
		t.Fatalf("a command killed by SIGKILL: exit %d; want 137", code)
	}
}

func TestExec(t *testing.T) {
	dir := t.TempDir()
	env := EncodeEnv([]string{"A", "B"}, map[string]string{"A": "x=y", "B": "two words\nand a line"})
	stdin := io.MultiReader(bytes.NewReader(env), strings.NewReader("the command's stdin"))
	code, out, errs := run(t, []string{"KUBERNETES_SERVICE_HOST=10.0.0.1"}, stdin, "exec", dir, "--", "sh", "-c",
		`printf '%s|%s|%s|' "$A" "$B" "$KUBERNETES_SERVICE_HOST"; pwd; cat; echo; ps -o pgid= -p $$ | tr -d ' '`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	head, _, _ := strings.Cut(errs, "\n")
	pid := strings.TrimPrefix(head, ExecMark)
	if !strings.HasPrefix(errs, ExecMark) {
		t.Fatalf("stderr %q does not start with the mark", errs)
	}
	want := "x=y|two words\nand a line||" + dir + "\nthe command's stdin\n" + pid + "\n"
	if _, err := exec.LookPath("ps"); err != nil {
		want = strings.TrimSuffix(want, pid+"\n")
		out = strings.TrimSuffix(out, "\n")
		out = out[:strings.LastIndex(out, "\n")+1]
	}
	if out != want {
		t.Fatalf("stdout %q; want %q (env from stdin, the working directory, the rest of stdin, its own process group)", out, want)
	}
	code, _, errs = run(t, nil, bytes.NewReader(EncodeEnv(nil, nil)), "exec", filepath.Join(dir, "nope"), "--", "true")
	if code != 126 || !strings.Contains(errs, "No such file or directory") {
		t.Fatalf("missing directory: %d %q", code, errs)
	}
	code, _, errs = run(t, nil, strings.NewReader("99999999999\n"), "exec", dir, "--", "true")
	if code != 127 || !strings.Contains(errs, "environment header") {
		t.Fatalf("an environment over its bound: %d %q", code, errs)
	}
}

func TestKill(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, nil, nil, "kill", "TERM", "-"+strconv.Itoa(sleeper.Process.Pid)); code != 0 {
		t.Fatalf("kill the group: %d %s", code, errs)
	}
	if err := sleeper.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("the sleeper: %v; want terminated", err)
	}
	if code, _, _ := run(t, nil, nil, "kill", "NOPE", "1"); code != 2 {
		t.Fatalf("an unknown signal: exit %d", code)
	}
}

// shortDir is a directory whose sockets fit sun_path.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestDial(t *testing.T) {
	// A path longer than sun_path: dial connects from the directory.
	deep := filepath.Join(shortDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(deep, "s.sock")
	if code, out, _ := run(t, nil, strings.NewReader(""), "dial", sock); code != 3 || out != "\x03" {
		t.Fatalf("nothing listening: exit %d, %q; want 3 and the byte 3", code, out)
	}
	old, _ := os.Getwd()
	_ = os.Chdir(deep)
	l, err := net.Listen("unix", "s.sock")
	_ = os.Chdir(old)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		_, _ = c.Write(bytes.ToUpper(b))
		c.Close()
	}()
	code, out, errs := run(t, nil, strings.NewReader("ping"), "dial", sock)
	if code != 0 || out != "\x01PING" {
		t.Fatalf("dial: %d %q %s; want the connected byte and the answer", code, out, errs)
	}
}

func TestListen(t *testing.T) {
	dir := shortDir(t)
	a, b := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	_ = os.WriteFile(a, []byte("in the way"), 0o644) // replaced
	cmd := exec.Command(agentBin(t), "listen", a, b)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	br := bufio.NewReader(outp)
	if f, err := ReadFrame(br); err != nil || f.Type != FrameReady {
		t.Fatalf("first frame %+v, %v; want ready", f, err)
	}
	if st, err := os.Stat(b); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o666 {
		t.Fatalf("b.sock: %v %v", st, err)
	}
	c, err := net.Dial("unix", b)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(br)
	if err != nil || f.Type != FrameOpen || binary.BigEndian.Uint32(f.Data) != 1 {
		t.Fatalf("open frame %+v, %v; want listener 1", f, err)
	}
	id := f.Conn
	_, _ = c.Write([]byte("hi core"))
	if f, err = ReadFrame(br); err != nil || f.Type != FrameData || string(f.Data) != "hi core" || f.Conn != id {
		t.Fatalf("data frame %+v, %v", f, err)
	}
	_ = WriteFrame(in, Frame{Type: FrameData, Conn: id, Data: []byte("hi sandbox")})
	_ = WriteFrame(in, Frame{Type: FrameEOF, Conn: id})
	got, _ := io.ReadAll(c)
	if string(got) != "hi sandbox" {
		t.Fatalf("the sandbox read %q", got)
	}
	_ = c.(*net.UnixConn).CloseWrite()
	if f, err = ReadFrame(br); err != nil || f.Type != FrameEOF {
		t.Fatalf("eof frame %+v, %v", f, err)
	}
	// A frame over its bound is refused by the reader.
	var big bytes.Buffer
	_ = WriteFrame(&big, Frame{Type: FrameData, Data: make([]byte, MaxFrame+1)})
	if _, err := ReadFrame(&big); err == nil {
		t.Fatal("a frame over MaxFrame was read")
	}
}

func TestInstallAndUsage(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "copy")
	if code, _, errs := run(t, nil, nil, "install", dest); code != 0 {
		t.Fatalf("install: %d %s", code, errs)
	}
	if st, err := os.Stat(dest); err != nil || st.Mode().Perm() != 0o555 || st.Size() == 0 {
		t.Fatalf("installed: %v %v", st, err)
	}
	for _, args := range [][]string{nil, {"nope"}, {"init", "out"}, {"exec", "dir", "cmd"}, {"kill", "TERM"}} {
		if code, _, errs := run(t, nil, nil, args...); code != 2 || !strings.Contains(errs, "usage") {
			t.Errorf("%q: exit %d %q; want usage", args, code, errs)
		}
	}
}
