package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func only(t *testing.T, rs []Result, st Status, detail string) {
	t.Helper()
	for _, r := range rs {
		if r.Status == st && strings.Contains(r.Detail, detail) {
			return
		}
	}
	t.Fatalf("no %s result saying %q in %+v", st, detail, rs)
}

// Doctor says why the audit log cannot be written, and that executions are
// refused meanwhile.
func TestAuditLogCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	only(t, AuditLog(path), OK, "is writable")

	os.Chmod(path, 0o644)
	only(t, AuditLog(path), Warn, "mode -rw-r--r--")

	os.Remove(path)
	os.Mkdir(path, 0o700)
	rs := AuditLog(path)
	only(t, rs, Fail, "is a directory")
	only(t, rs, Fail, "refuses every execution")
}

func TestAuditLogCheckFullDisk(t *testing.T) {
	// A mount is the end-to-end tier's: make test-unit touches nothing of the host.
	if os.Getenv("FORGE_E2E") != "1" {
		t.Skip("mounts a tmpfs: end-to-end tier, set FORGE_E2E=1 (make test does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	os.WriteFile(filepath.Join(dir, "fill"), make([]byte, 250<<10), 0o600)
	only(t, AuditLog(filepath.Join(dir, "audit.log")), Fail, "bytes free")
}
