package workspace

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDialSocket(t *testing.T) {
	dir := t.TempDir()
	w := &Workspace{Path: dir}
	long := filepath.Join("deep", strings.Repeat("d", 100))
	for _, d := range []string{"k", long} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	listen := func(rel string) {
		// Listen from the directory: the full path may be over sun_path.
		wd, _ := os.Getwd()
		os.Chdir(filepath.Join(dir, filepath.Dir(rel)))
		l, err := net.Listen("unix", filepath.Base(rel))
		os.Chdir(wd)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
	}
	listen("k/echo")
	listen(filepath.Join(long, "s"))
	stale, err := net.Listen("unix", filepath.Join(dir, "k", "stale"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	os.WriteFile(filepath.Join(dir, "k", "file"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(dir, "k", "echo"), filepath.Join(dir, "k", "link"))
	os.Symlink(filepath.Join(dir, "k"), filepath.Join(dir, "kl"))
	for _, tc := range []struct {
		rel  string
		want error // nil: connects and echoes
	}{
		{"k/echo", nil},
		{filepath.Join(long, "s"), nil},
		{"k/missing", ErrNoListener},
		{"k/stale", ErrNoListener},
		{"k/file", ErrNotSocket},
		{"k/link", ErrLink},
		{"kl/echo", ErrLink},
		{"../x", ErrPath},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			c, err := w.DialSocket(context.Background(), tc.rel)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("DialSocket = %v; want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("ping"))
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo %q, %v", buf, err)
			}
		})
	}
}
