package workspace

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type refusingProv struct{ enforced bool }

func (p refusingProv) Provision(string, int64, int, int) error {
	return errors.New("the workspace quota cannot be enforced on this host")
}
func (p refusingProv) Release(string) error { return nil }
func (p refusingProv) Enforced() bool       { return p.enforced }

// A refused workspace names the setting that decides it.
func TestQuotaRefusalNamesSetting(t *testing.T) {
	m := New(t.TempDir(), "tag", 1<<20, refusingProv{})
	_, err := m.Create("s")
	if err == nil || !strings.Contains(err.Error(), `security.waive = ["workspace-quota"]`) {
		t.Fatalf("want the refusal to name the workspace-quota waiver, got %v", err)
	}
	m = New(t.TempDir(), "tag", 1<<20, refusingProv{enforced: true})
	if _, err := m.Create("s"); err == nil || strings.Contains(err.Error(), "security.waive") {
		t.Fatalf("an enforcing provisioner's own failure is not a quota refusal: %v", err)
	}
}

// What the core creates in a workspace: under root 0755/0644 and given to
// the workspace's owner (the sandbox user, as Podman's U left it); under a
// server that is not root, open to the sandbox user by mode whatever the
// umask, and the sandbox's own directories left as it made them.
func TestSharedModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gives directories to another uid as Podman's U does: needs root")
	}
	const sandboxUID = 4321
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	for _, c := range []struct {
		name               string
		shared             bool
		dir, file, subdir  os.FileMode
		owner, subdirOwner int
	}{
		{"root", false, 0o755, 0o644, 0o755, sandboxUID, sandboxUID},
		{"not root", true, 0o777, 0o666, 0o777, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(s bool) { shared = s }(shared)
			shared = c.shared
			m := New(t.TempDir(), "tag", 0, nil)
			w, err := m.Create("s")
			if err != nil {
				t.Fatal(err)
			}
			work, err := w.Dir("work/in")
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{w.Path + "/work", work} {
				if st := stat(t, d); st.Mode().Perm() != c.dir {
					t.Errorf("Dir made %s %v, want %v", d, st.Mode().Perm(), c.dir)
				}
			}
			if err := w.WriteFile("work/input.txt", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if st := stat(t, w.Path+"/work/input.txt"); st.Mode().Perm() != c.file {
				t.Errorf("WriteFile made %v, want %v", st.Mode().Perm(), c.file)
			}
			// Podman's U, then the server writes into the session.
			if err := os.Chown(w.Path+"/work", sandboxUID, sandboxUID); err != nil {
				t.Fatal(err)
			}
			f := NewFiles(w.Path + "/work")
			if err := f.WriteFile("up/data.csv", []byte("a,b\n")); err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]struct {
				mode  os.FileMode
				owner int
			}{"up": {c.subdir, c.subdirOwner}, "up/data.csv": {c.file, c.owner}} {
				st := stat(t, w.Path+"/work/"+p)
				if st.Mode().Perm() != want.mode || int(st.Sys().(*syscall.Stat_t).Uid) != want.owner {
					t.Errorf("%s: %v owned by %d, want %v owned by %d", p, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, want.mode, want.owner)
				}
			}
			// A directory the sandbox made and closed keeps its mode when
			// a later container mounts the workspace again.
			if err := os.Chmod(w.Path+"/work", 0o700); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Dir("work"); err != nil {
				t.Fatal(err)
			}
			if st := stat(t, w.Path+"/work"); st.Mode().Perm() != 0o700 {
				t.Errorf("the sandbox's directory was changed to %v", st.Mode().Perm())
			}
		})
	}
}

// A link the sandbox planted where the core shares a directory or writes
// a file is refused, and what it points to keeps its mode.
func TestSharedRefusesLinks(t *testing.T) {
	for _, mode := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared by mode", false: "root"}[mode], func(t *testing.T) { refusesLinks(t, mode) })
	}
}

// refusesLinks: a link the sandbox planted in its workspace is never
// followed by the server's writes, shared by mode (a non-root server) or
// not (root, which would write anywhere through it), and a FIFO planted
// at a file's place is refused rather than opened.
func refusesLinks(t *testing.T, mode bool) {
	defer func(s bool) { shared = s }(shared)
	shared = mode
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(outside+"/y", 0o700); err != nil {
		t.Fatal(err)
	}
	w := workWorkspace(t)
	if err := os.Symlink(outside, w.Path+"/work/x"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"Dir", func() error { _, err := w.Dir("work/x/y"); return err }},
		{"Dir beyond", func() error { _, err := w.Dir("work/x/z"); return err }},
		{"WriteFile beyond", func() error { return w.WriteFile("work/x/z/f.txt", []byte("x")) }},
		{"WriteFile", func() error { return w.WriteFile("work/x/f.txt", []byte("x")) }},
		{"WriteFile at the link", func() error { return w.WriteFile("work/x", []byte("x")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.do(); !errors.Is(err, ErrLink) {
				t.Errorf("got %v, want ErrLink", err)
			}
			for _, p := range []string{outside, outside + "/y"} {
				if st := stat(t, p); st.Mode().Perm() != 0o700 {
					t.Errorf("%s is now %v", p, st.Mode().Perm())
				}
			}
			for _, p := range []string{"/f.txt", "/z"} {
				if _, err := os.Lstat(outside + p); err == nil {
					t.Errorf("%s was made through the link", p)
				}
			}
		})
	}
}

// workWorkspace is a fresh workspace with its work directory made as for
// a mount (in the current mode).
func workWorkspace(t *testing.T) *Workspace {
	t.Helper()
	w, err := New(t.TempDir(), "tag", 0, nil).Create("s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Dir("work"); err != nil {
		t.Fatal(err)
	}
	return w
}

// A FIFO the sandbox planted where the server writes a file is refused at
// once, not opened (which would wait for a reader), in either mode.
func TestWriteFileRefusesFIFO(t *testing.T) {
	for _, mode := range []bool{true, false} {
		func() {
			defer func(s bool) { shared = s }(shared)
			shared = mode
			w := workWorkspace(t)
			if err := unix.Mkfifo(w.Path+"/work/p", 0o666); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- w.WriteFile("work/p", []byte("x")) }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) {
					t.Errorf("shared %v: %v, want ErrNotRegular", mode, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("shared %v: WriteFile waits on a FIFO", mode)
			}
		}()
	}
}

// A host root's files are the host's, not a workspace's: a server that is
// not root still writes them 0644 in 0755 directories, and never reads
// through the user namespace there.
func TestHostFilesNotShared(t *testing.T) {
	defer func(s bool) { shared = s }(shared)
	shared = true
	dir := t.TempDir()
	f := NewHostFiles(dir)
	if err := f.WriteFrom("results/2026/out.csv", strings.NewReader("a,b\n")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"results": 0o755, "results/2026": 0o755, "results/2026/out.csv": 0o644} {
		if got := stat(t, dir+"/"+p).Mode().Perm(); got&^want != 0 {
			t.Errorf("%s is %v, want at most %v", p, got, want)
		}
	}
	// A refused open of a host root's file is the refusal: no helper run.
	denied := fmt.Errorf("open private: %w", unix.EACCES)
	if fd, err := openDenied(f, "private", denied); fd != -1 || err != denied || f.denied.Load() != 0 {
		t.Errorf("a host root's refused open went to the helper: %d %v", fd, err)
	}
	if _, err := openDenied(NewFiles(dir), "private", denied); err == denied {
		t.Error("a workspace's refused open did not try the helper (the check above proves nothing)")
	}
}

// Refused opens name the reason, and a server that is not root says how
// the session can open what its code closed.
func TestDeniedPath(t *testing.T) {
	for _, c := range []struct {
		name   string
		shared bool
		err    error
		is     error
		hint   bool
	}{
		{"root", false, unix.EACCES, ErrDenied, false},
		{"not root", true, unix.EACCES, ErrDenied, true},
		{"not root, a link", true, unix.ELOOP, ErrLink, false},
		{"not root, missing", true, unix.ENOENT, ErrNotFound, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func(s bool) { shared = s }(shared)
			shared = c.shared
			err := pathErr("private.txt", c.err)
			if !errors.Is(err, c.is) || strings.Contains(err.Error(), "os.chmod") != c.hint {
				t.Errorf("pathErr(%v) = %v; want %v, hint %v", c.err, err, c.is, c.hint)
			}
		})
	}
}

func stat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
