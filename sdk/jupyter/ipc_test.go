package jupyter

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Sandboxed code can replace a kernel's socket (or its directory) with a
// symlink to a host socket: the host side must refuse, not follow it.
func TestCheckIPCRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "k-1")
	l, err := net.Listen("unix", real)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	host := filepath.Join(t.TempDir(), "host.sock")
	hl, err := net.Listen("unix", host)
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	os.Symlink(host, filepath.Join(dir, "k-2"))
	os.WriteFile(filepath.Join(dir, "k-3"), nil, 0o644)
	linked := filepath.Join(t.TempDir(), "k")
	os.Symlink(dir, linked)
	for _, c := range []struct {
		ep string
		ok bool
	}{
		{"ipc://" + real, true},
		{"ipc://" + filepath.Join(dir, "k-9"), true}, // not bound yet
		{"ipc://" + filepath.Join(dir, "k-2"), false},
		{"ipc://" + filepath.Join(dir, "k-3"), false},
		{"ipc://" + linked + "/k-1", false},
		{"tcp://127.0.0.1:1", true},
	} {
		if err := checkIPC(c.ep); (err == nil) != c.ok {
			t.Errorf("checkIPC(%s) = %v, want ok=%v", c.ep, err, c.ok)
		}
	}
}
