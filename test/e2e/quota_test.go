package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// fillCode writes to big.bin until the workspace is full (ENOSPC), and
// keeps the file.
const fillCode = `import os
fd = os.open('big.bin', os.O_WRONLY | os.O_CREAT | os.O_APPEND)
try:
    while True:
        os.write(fd, b'0' * (1 << 20))
except OSError as e:
    print(e.errno)
os.close(fd)
`

// A workspace that fills its kernel-enforced quota (each workspace its own
// filesystem) leaves a workspace-quota violation in the audit log, as the
// walk-based quota does: once per fill, for a stateless run's workspace and
// for a session's (by its internal id), and again when a session that freed
// its space fills it anew. Before, the kernel refused the writes and the
// log said nothing.
func TestFullWorkspaceAudited(t *testing.T) {
	s := testenv.StartServer(t, "[volumes]\nsession_quota = \"8m\"\n")
	quotaLines := func() []audit.Entry {
		var out []audit.Entry
		for _, e := range auditEntries(t, s.AuditLog) {
			if e.Event == audit.SecurityViolation && e.Details["rule"] == "workspace-quota" {
				out = append(out, e)
			}
		}
		return out
	}
	run := func(code, session string) out {
		t.Helper()
		args := map[string]any{"code": code}
		if session != "" {
			args["session_id"] = session
		}
		var o out
		if res := s.Call(t, "execute_python", args, &o); res.IsError {
			t.Fatalf("%q in %q: %s", code, session, testenv.Text(res))
		}
		return o
	}

	// A stateless run: its workspace goes with its container, and is
	// audited once whichever of the run's end or its removal sees it full.
	if o := run(fillCode, ""); o.Stdout != "28\n" {
		t.Fatalf("the stateless fill did not end in ENOSPC: %+v", o)
	}
	if !poll(10*time.Second, func() bool { return len(quotaLines()) > 0 }) {
		t.Fatal("a stateless run filled its workspace and the audit log has no workspace-quota line")
	}
	time.Sleep(time.Second) // the container's removal, which checks again
	if l := quotaLines(); len(l) != 1 || l[0].Severity != audit.Warning || l[0].Details["enforced"] != "kernel" || l[0].Error == "" {
		t.Fatalf("want one workspace-quota warning for the stateless run, got %+v", l)
	}

	// A session: one line per fill, under the session's internal id.
	if o := run(fillCode, "q1"); o.Stdout != "28\n" {
		t.Fatalf("the session fill did not end in ENOSPC: %+v", o)
	}
	internal := ""
	for _, e := range auditEntries(t, s.AuditLog) {
		if e.Event == audit.SessionCreate && e.Details["session"] == "q1" {
			internal = e.SessionID
		}
	}
	sessionLines := func() []audit.Entry {
		var out []audit.Entry
		for _, e := range quotaLines() {
			if e.SessionID == internal {
				out = append(out, e)
			}
		}
		return out
	}
	if l := sessionLines(); internal == "" || len(l) != 1 || l[0].Details["session"] != "q1" {
		t.Fatalf("want one workspace-quota line for session q1 (%s) after its fill, got %+v (all: %+v)", internal, l, quotaLines())
	}
	run("1", "q1") // still full: the same fill
	if l := sessionLines(); len(l) != 1 {
		t.Fatalf("a still-full workspace was audited again: %+v", l)
	}
	run("import os\nos.remove('big.bin')", "q1")
	if o := run(fillCode, "q1"); o.Stdout != "28\n" {
		t.Fatalf("the second fill did not end in ENOSPC: %+v", o)
	}
	if l := sessionLines(); len(l) != 2 {
		t.Fatalf("want a second line for the second fill, got %+v", l)
	}
	// Code that does not catch the ENOSPC is told why its write failed.
	var o out
	s.Call(t, "execute_python", map[string]any{"session_id": "q1", "code": "open('more.bin', 'wb').write(b'0' * (1 << 20))"}, &o)
	if o.Success || !strings.Contains(strings.Join(o.Notices, "\n"), "volumes.session_quota") {
		t.Fatalf("a write into the full workspace: want a failure with a notice naming volumes.session_quota, got success %v, notices %q", o.Success, o.Notices)
	}
}
