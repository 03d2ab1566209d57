package workspace

import (
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The helper hands back a read-only descriptor of a regular file beneath
// its root, and nothing else: no link followed, no directory, pipe or path
// out of the root.
func TestOpenHelper(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, f := range []struct{ name, data string }{{"private.txt", "secret"}, {"sub/deep.txt", "deep"}} {
		if err := os.MkdirAll(root+"/sub", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(root+"/"+f.name, []byte(f.data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(outside+"/shadow", []byte("host"), 0o600)
	os.Symlink(outside+"/shadow", root+"/link")
	os.Symlink(outside, root+"/dirlink")
	unix.Mkfifo(root+"/fifo", 0o600)
	for _, c := range []struct {
		name string
		args []string
		want string // content read through the descriptor; "" for a refusal
		msg  string // in the refusal
	}{
		{"file", []string{root, "private.txt"}, "secret", ""},
		{"deeper", []string{root, "sub/deep.txt"}, "deep", ""},
		{"link", []string{root, "link"}, "", "link"},
		{"through a link", []string{root, "dirlink/shadow"}, "", "link"},
		{"pipe", []string{root, "fifo"}, "", "not a regular file"},
		{"directory", []string{root, "sub"}, "", "not a regular file"},
		{"up", []string{root, "../shadow"}, "", "not a clean relative path"},
		{"absolute", []string{root, outside + "/shadow"}, "", "not a clean relative path"},
		{"unclean", []string{root, "sub/../private.txt"}, "", "not a clean relative path"},
		{"root a link", []string{root + "/dirlink", "shadow"}, "", "open"},
		{"arguments", []string{root}, "", "usage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(pair[0])
			status := runOpenHelper(pair[1], c.args)
			unix.Close(pair[1])
			buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
			n, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			var fds []int
			if oobn > 0 {
				msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
				fds, _ = unix.ParseUnixRights(&msgs[0])
			}
			if c.want == "" {
				if status == 0 || len(fds) != 0 || !strings.Contains(string(buf[:n]), c.msg) {
					t.Errorf("status %d, %d descriptors, message %q; want a refusal with %q", status, len(fds), buf[:n], c.msg)
				}
				return
			}
			if status != 0 || string(buf[:n]) != "ok" || len(fds) != 1 {
				t.Fatalf("status %d, message %q, %d descriptors", status, buf[:n], len(fds))
			}
			f := os.NewFile(uintptr(fds[0]), "received")
			defer f.Close()
			if b, _ := io.ReadAll(f); string(b) != c.want {
				t.Errorf("read %q, want %q", b, c.want)
			}
			if _, err := f.Write([]byte("x")); err == nil {
				t.Errorf("the descriptor is writable")
			}
		})
	}
}

// The helper is tried only by a server that is not root, and at most
// maxDenied times for one Files value; otherwise the refusal stands.
func TestOpenDeniedBound(t *testing.T) {
	denied := error(syscall.EACCES)
	for _, c := range []struct {
		name   string
		shared bool
		used   int64
	}{
		{"root", false, 0},
		{"not root, past the bound", true, maxDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(s bool) { shared = s }(shared)
			shared = c.shared
			f := NewFiles(t.TempDir())
			f.denied.Store(c.used)
			if fd, err := openDenied(f, "x", denied); fd != -1 || !errors.Is(err, unix.EACCES) || err.Error() != denied.Error() {
				t.Errorf("openDenied = %d, %v; want the refusal as it was, no helper run", fd, err)
			}
		})
	}
}
