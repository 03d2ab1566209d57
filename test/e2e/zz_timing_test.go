package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func TestZZTiming(t *testing.T) {
	t0 := time.Now()
	lap := func(what string) { t.Logf("%6.2fs %s", time.Since(t0).Seconds(), what) }
	s := testenv.StartServer(t, os.Getenv("ZZ_EXTRA"))
	lap("started")
	s.Call(t, "execute_python", map[string]any{"code": "open('x','w').write('1')", "session_id": "names"}, nil)
	lap("session execute")
	s.Call(t, "list_files", map[string]any{"session_id": "names"}, nil)
	lap("list")
	s.Call(t, "execute_python", map[string]any{"code": "print(1)"}, nil)
	lap("stateless")
	s.Session.Close()
	lap("closed")
	logs, _ := filepath.Glob(filepath.Join(s.Base, "*.log"))
	for _, l := range logs {
		if strings.Contains(l, "audit") { continue }
		b, _ := os.ReadFile(l)
		t.Logf("%s", b)
	}
}
