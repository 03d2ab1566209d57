package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

// Code that breaks the resident runner's channel, warm and cold: it closes
// the connection (Python), kills the relay that holds it (R), or plants a
// link and another socket where the runner's socket was. The call still
// ends promptly, reported from the container's end (its output comes
// back), never at the timeout, and the next call works: the plugin never
// dials a container again once it has its connection.
func TestRunnerChannelHostileCode(t *testing.T) {
	const closeConn = "import os, stat\n" +
		"for fd in map(int, os.listdir('/proc/self/fd')):\n" +
		"    try:\n" +
		"        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n" +
		"            os.close(fd)\n" +
		"    except OSError:\n" +
		"        pass\n" +
		"print('after')\n"
	const replace = "import os, socket\n" +
		"os.symlink('/run/podman/podman.sock', '/forge/chan/runner.sock')\n" +
		"s = socket.socket(socket.AF_UNIX)\n" +
		"s.bind('/forge/chan/other.sock')\n" +
		"s.listen(1)\n" +
		"print('after')\n"
	const killRelay = "for (p in list.files('/proc', pattern = '^[0-9]+$')) {\n" +
		"  cmd <- tryCatch(readBin(file.path('/proc', p, 'cmdline'), 'raw', 4096), error = function(e) raw(0))\n" +
		"  if (grepl('^perl', rawToChar(cmd[cmd != as.raw(0)]))) tools::pskill(as.integer(p), 9L)\n" +
		"}\n" +
		"Sys.sleep(0.5)\n" +
		"cat('after\\n')\n"
	for _, cfg := range []struct{ name, toml string }{
		{"warm", testenv.DefaultPools},
		{"cold", "[plugins.python.config]\nwarm = 0\n[plugins.r.config]\nwarm = 0\n"},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			s := testenv.StartServer(t, cfg.toml)
			for _, c := range []struct{ name, lang, code string }{
				{"python closes the connection", "python", closeConn},
				{"python replaces the socket", "python", replace},
				{"r kills the relay", "r", killRelay},
			} {
				start := time.Now()
				var o out
				res := s.Call(t, "execute_"+c.lang, map[string]any{"code": c.code, "timeout": 60}, &o)
				took := time.Since(start)
				if took > 20*time.Second || !strings.Contains(o.Stdout, "after") || (o.Error != nil && o.Error.Type == "Timeout") {
					t.Errorf("%s: %s after %v: %s", c.name, testenv.Text(res), took, o.Stdout)
				}
				var next out
				if res := s.Call(t, "execute_"+c.lang, map[string]any{"code": "6 * 7"}, &next); res.IsError || !strings.Contains(next.Result, "42") {
					t.Errorf("%s: the next call: %s", c.name, testenv.Text(res))
				}
			}
		})
	}
}
