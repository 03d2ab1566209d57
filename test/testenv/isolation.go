package testenv

import (
	"os"
	"testing"
)

// IsolationEnv names the isolation this run's servers use
// (security.isolation): "gvisor" for make test's gVisor leg; empty for the
// configuration's default.
const IsolationEnv = "FORGE_TEST_ISOLATION"

// GVisor says whether this run's servers run their sandboxes under gVisor.
func GVisor() bool { return os.Getenv(IsolationEnv) == "gvisor" }

// RequireGVisor skips a test of gVisor itself outside the gVisor leg (make
// test runs it with runsc installed; there a missing runsc fails the test).
func RequireGVisor(t testing.TB) {
	t.Helper()
	skipUnlessE2E(t)
	if !GVisor() {
		t.Skip("a test of gVisor isolation: " + IsolationEnv + "=gvisor runs it (make test's gVisor leg)")
	}
}

func isolationEnv() []string {
	if v := os.Getenv(IsolationEnv); v != "" {
		return []string{"FORGE_SECURITY_ISOLATION=" + v}
	}
	return nil
}

// RootWriteError is the error (strerror) a non-root process in the sandbox
// gets creating a file on its read-only root: gVisor's Sentry checks the
// directory's permissions before the mount's read-only flag, Linux the
// flag first. Either way the write fails; statvfs says the root is
// read-only on both.
func RootWriteError() string {
	if GVisor() {
		return "Permission denied"
	}
	return "Read-only file system"
}
