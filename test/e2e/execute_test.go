package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/forge"
	"github.com/mcp-forge/mcp-forge/core/mcpserver"
	"github.com/mcp-forge/mcp-forge/test/testenv"
)

type out = mcpserver.ExecuteOutput

func TestExecutePython(t *testing.T) {
	s := testenv.StartServer(t, "[execution]\nmax_output = \"64k\"\n")
	cases := []struct {
		name    string
		args    map[string]any
		isError bool
		check   func(t *testing.T, o out, text string)
	}{
		{"print", map[string]any{"code": "print('hello from the sandbox')"}, false, func(t *testing.T, o out, text string) {
			if o.Stdout != "hello from the sandbox\n" || !o.Success || o.ExitCode != 0 {
				t.Errorf("%+v", o)
			}
			if !strings.Contains(text, "hello from the sandbox") {
				t.Errorf("text summary lacks stdout: %q", text)
			}
		}},
		{"last expression", map[string]any{"code": "x = 41\nx + 1"}, false, func(t *testing.T, o out, _ string) {
			if o.Result != "42" {
				t.Errorf("result %#v", o.Result)
			}
		}},
		{"dataframe repr", map[string]any{"code": "import pandas as pd\npd.DataFrame({'a': [1, 2]})"}, false, func(t *testing.T, o out, _ string) {
			if !strings.Contains(o.ResultRepr, "0  1") {
				t.Errorf("result %#v repr %q", o.Result, o.ResultRepr)
			}
		}},
		{"syntax error", map[string]any{"code": "x = 1\nif x\n    print(x)"}, true, func(t *testing.T, o out, text string) {
			if o.Error == nil || o.Error.Type != "SyntaxError" || o.Error.Line != 2 || o.Error.Column == 0 {
				t.Errorf("%+v", o.Error)
			}
			if !strings.Contains(text, "line 2") {
				t.Errorf("summary does not give the line: %q", text)
			}
		}},
		{"runtime error", map[string]any{"code": "def f(d):\n    return d['missing']\n\nf({})"}, true, func(t *testing.T, o out, _ string) {
			if o.Error == nil || o.Error.Type != "KeyError" || o.Error.Line != 2 {
				t.Fatalf("%+v", o.Error)
			}
			tb := strings.Join(o.Error.Traceback, "")
			if !strings.Contains(tb, `line 4`) || !strings.Contains(tb, "return d['missing']") || strings.Contains(tb, "runner") {
				t.Errorf("traceback:\n%s", tb)
			}
		}},
		{"timeout", map[string]any{"code": "import time\ntime.sleep(120)", "timeout": 3}, true, func(t *testing.T, o out, _ string) {
			if o.Error == nil || o.Error.Type != "Timeout" || !strings.Contains(o.Error.Message, "3s") {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"memory bomb", map[string]any{"code": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))\n    blocks[-1][::4096] = b'x' * len(blocks[-1][::4096])"}, true, func(t *testing.T, o out, _ string) {
			if o.Error == nil || o.Error.Type != "OutOfMemory" || !strings.Contains(o.Error.Message, "512m") {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"network attempt", map[string]any{"code": "import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=3)"}, true, func(t *testing.T, o out, _ string) {
			if o.Error == nil || !strings.Contains(o.Error.Type+o.Error.Message, "OSError") && !strings.Contains(o.Error.Message, "unreachable") {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"huge output", map[string]any{"code": "import sys\nfor i in range(200000):\n    print('line', i)\nsys.stderr.write('e' * 300000)"}, false, func(t *testing.T, o out, text string) {
			if len(o.Stdout) > 64*1024+1 || o.StdoutBytes < 2_000_000 || !o.Truncated {
				t.Errorf("stdout %d bytes returned, %d reported, truncated=%v", len(o.Stdout), o.StdoutBytes, o.Truncated)
			}
			if len(o.Stderr) > 64*1024+1 || o.StderrBytes != 300000 {
				t.Errorf("stderr %d returned, %d reported", len(o.Stderr), o.StderrBytes)
			}
			if !strings.Contains(text, "stdout cut at 64k") {
				t.Errorf("no truncation notice in %q", text[len(text)-300:])
			}
		}},
		{"write outside tmp", map[string]any{"code": "open('/usr/x', 'w')"}, true, func(t *testing.T, o out, _ string) {
			// gVisor checks the file's permissions (root's /usr) before the
			// read-only mount: EACCES there, EROFS on the host's kernel.
			if o.Error == nil || !strings.Contains(o.Error.Message, "Read-only file system") && !(testenv.GVisor() && strings.Contains(o.Error.Message, "Permission denied")) {
				t.Errorf("%+v", o.Error)
			}
		}},
		{"bad custom image", map[string]any{"code": "1", "custom_image": "docker.io/library/python:3"}, true, func(t *testing.T, o out, text string) {
			if !strings.Contains(text, "images.allowed") {
				t.Errorf("%q", text)
			}
		}},
		{"allowed image not built", map[string]any{"code": "1", "custom_image": "mcp-forge/custom:never-built"}, true, func(t *testing.T, o out, text string) {
			if o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(text, "not present") {
				t.Errorf("%+v %q", o.Error, text)
			}
		}},
		{"session on a stateless backend", map[string]any{"code": "1", "session_id": "s1", "backend": "python"}, true, func(t *testing.T, o out, text string) {
			if !strings.Contains(text, "stateless") {
				t.Errorf("%q", text)
			}
		}},
		// bin/ holds the mcpbridge plugin, so the bridge is there but this
		// config names no [mcp_tools.*] server.
		{"mcp tools without a configured server", map[string]any{"code": "1", "mcp_tools": []string{"memory"}}, true, func(t *testing.T, o out, text string) {
			if o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(text, `mcp_tools "memory": no such MCP server is configured (configured: none)`) || !strings.Contains(text, "[mcp_tools.NAME]") {
				t.Errorf("%q", text)
			}
		}},
		{"timeout over max", map[string]any{"code": "1", "timeout": 99999}, true, func(t *testing.T, o out, text string) {
			if !strings.Contains(text, "execution.max_timeout") {
				t.Errorf("%q", text)
			}
		}},
		{"environment", map[string]any{"code": "import os\nos.environ['GREETING']", "environment": map[string]string{"GREETING": "hi"}}, false, func(t *testing.T, o out, _ string) {
			if o.Result != `"hi"` {
				t.Errorf("%#v", o.Result)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o out
			res := s.Call(t, "execute_python", tc.args, &o)
			if res.IsError != tc.isError {
				t.Errorf("isError = %v, want %v: %s", res.IsError, tc.isError, testenv.Text(res))
			}
			tc.check(t, o, testenv.Text(res))
		})
	}
}

func TestPlotComesBackAsImage(t *testing.T) {
	s := testenv.StartServer(t, "")
	code := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.savefig('saved.png')"
	res := s.Call(t, "execute_python", map[string]any{"code": code}, nil)
	var pngs int
	for _, c := range res.Content {
		if im, ok := c.(*mcp.ImageContent); ok && im.MIMEType == "image/png" && len(im.Data) > 1000 && string(im.Data[1:4]) == "PNG" {
			pngs++
		}
	}
	// saved.png and the still-open figure.
	if pngs != 2 {
		t.Fatalf("want 2 PNG images, got %d: %s", pngs, testenv.Text(res))
	}
}

func TestEightConcurrentCalls(t *testing.T) {
	s := testenv.StartServer(t, testenv.NoSessionPools+coldConfig)
	var wg sync.WaitGroup
	results := make([]out, 8)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s.Call(t, "execute_python", map[string]any{"code": "import os\n" + strings.Repeat(" ", 0) + "sum(range(" + string(rune('1'+i)) + "))"}, &results[i])
		}(i)
	}
	wg.Wait()
	for i, r := range results {
		n := i + 1
		if want := itoa(n * (n - 1) / 2); r.Result != want || !r.Success {
			t.Errorf("call %d: %+v", i, r)
		}
	}
	// Every one-shot container is gone once its call returned (its removal
	// finishes just after).
	var left []byte
	var err error
	testenv.WaitFor(t, "no container left after the calls", 30*time.Second, func() bool {
		left, err = exec.Command("podman", "ps", "-aq", "--filter", "label=io.mcp-forge.instance="+forge.Instance(s.Base)).Output()
		return err == nil && strings.TrimSpace(string(left)) == ""
	})
}

func TestEnvironmentResource(t *testing.T) {
	s := testenv.StartServer(t, "")
	res, err := s.Session.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.EnvironmentURI})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Images struct {
			InUse map[string][]string `json:"in_use"`
		} `json:"images"`
		Languages map[string]struct {
			Name      string
			Stateless struct{ Backend string }
			Session   struct{ Backend string }
		} `json:"languages"`
		Plugins []struct {
			Name, Version string
			APIVersion    int `json:"api_version"`
		} `json:"plugins"`
	}
	json.Unmarshal([]byte(res.Contents[0].Text), &info)
	py := info.Languages["python"]
	if len(info.Images.InUse["mcp-forge/python:3.11"]) != 2 || py.Name != "Python" || py.Stateless.Backend != "python" || py.Session.Backend != "jupyter" ||
		len(info.Plugins) == 0 || info.Plugins[0].APIVersion != 2 {
		t.Fatalf("%s", res.Contents[0].Text)
	}
}

// A plugin that dies mid-call: the call fails clearly, the server stays up,
// the next call restarts the plugin.
func TestPluginCrashRecovery(t *testing.T) {
	s := testenv.StartServer(t, "")
	s.Call(t, "execute_python", map[string]any{"code": "1"}, nil) // plugin is up
	done := make(chan *mcp.CallToolResult)
	go func() {
		done <- s.Call(t, "execute_python", map[string]any{"code": "import time\ntime.sleep(60)"}, nil)
	}()
	testenv.WaitFor(t, "the run's container to start", time.Minute, func() bool {
		return len(testenv.Containers(t, s.Base, true, "io.mcp-forge.one-shot=true")) > 0
	})
	killPlugin(t, s.Cmd.Process.Pid, "python")
	res := <-done
	if !res.IsError || !strings.Contains(testenv.Text(res), "crashed") {
		t.Fatalf("in-flight call: %s", testenv.Text(res))
	}
	var o out
	res = s.Call(t, "execute_python", map[string]any{"code": "6 * 7"}, &o)
	if res.IsError || o.Result != "42" {
		t.Fatalf("after restart: %s", testenv.Text(res))
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Each workspace is its own size-limited filesystem: a write past
// volumes.session_quota fails with ENOSPC inside the sandbox, including a
// file unlinked while open (invisible to any walk of the directory), and the
// error says which limit was hit.
func TestWorkspaceQuota(t *testing.T) {
	s := testenv.StartServer(t, "[volumes]\nsession_quota = \"20m\"\n[execution]\nmax_code_size = \"1k\"\n")
	fill := "import os\nf = open('big.bin', 'wb')\n%sfor i in range(64):\n    f.write(b'0' * (1 << 20))\n    f.flush()\n"
	for _, c := range []struct{ name, code, session string }{
		{"stateless write", fmt.Sprintf(fill, ""), ""},
		{"session write of an unlinked file", fmt.Sprintf(fill, "os.unlink('big.bin')\n"), "q1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var o out
			args := map[string]any{"code": c.code}
			if c.session != "" {
				args["session_id"] = c.session
			}
			res := s.Call(t, "execute_python", args, &o)
			if !res.IsError || o.Error == nil || !strings.Contains(o.Error.Message, "No space left on device") {
				t.Fatalf("%+v %s", o.Error, testenv.Text(res))
			}
			if !strings.Contains(testenv.Text(res), "volumes.session_quota") {
				t.Fatalf("no hint at the quota: %s", testenv.Text(res))
			}
		})
	}
	// The session survived its full disk and its files are still bounded.
	var o out
	if res := s.Call(t, "execute_python", map[string]any{"code": "f.close()\nimport shutil\nshutil.disk_usage('.').total", "session_id": "q1"}, &o); res.IsError {
		t.Fatal(testenv.Text(res))
	} else if total, _ := strconv.ParseFloat(o.Result, 64); total <= 0 || total > 20<<20 {
		t.Fatalf("workspace filesystem size %v, want at most 20m", o.Result)
	}
	res := s.Call(t, "execute_python", map[string]any{"code": strings.Repeat("x = 1\n", 400)}, nil)
	if !res.IsError || !strings.Contains(testenv.Text(res), "execution.max_code_size") {
		t.Fatal(testenv.Text(res))
	}
}

// Every execution is audited with the code's hash, the limits and the
// outcome, and the code itself never reaches the log.
func TestExecutionAudited(t *testing.T) {
	s := testenv.StartServer(t, testenv.DefaultPools+"[plugins.r.config]\nwarm = 0\n"+testenv.NoSessionPools)
	code := "planted = 'PLANTED-CODE-4411'\nprint(len(planted))"
	// With its own environment the run starts its own container (no warm
	// one matches); without, a warm container serves it.
	if res := s.Call(t, "execute_python", map[string]any{"code": code, "environment": map[string]string{"API_TOKEN": "PLANTED-TOKEN-9"}}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	warmCode := "planted = 'PLANTED-CODE-5522'\nprint(len(planted))"
	var o out
	warmCall(t, s, "python", map[string]any{"code": warmCode}, &o)
	sum := sha256.Sum256([]byte(code))
	want := hex.EncodeToString(sum[:])
	sum = sha256.Sum256([]byte(warmCode))
	wantWarm := hex.EncodeToString(sum[:])
	var raw []byte
	seen := map[string]bool{}
	// The used containers are removed just after the results come back.
	testenv.WaitFor(t, "the runs' audit records", time.Minute, func() bool {
		var err error
		raw, err = os.ReadFile(s.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		seen = map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var e struct {
				Event   string         `json:"event"`
				Success bool           `json:"success"`
				Details map[string]any `json:"details"`
			}
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("bad line %q", line)
			}
			switch e.Event {
			case "execution.request":
				seen[e.Event] = seen[e.Event] || e.Details["code_sha256"] == want && e.Details["timeout_s"] != nil
			case "container.create":
				seen[e.Event] = seen[e.Event] || e.Details["code_sha256"] == want && e.Details["memory"] != nil && e.Details["network"] == "none"
			case "plugin.warm_run":
				seen[e.Event] = seen[e.Event] || e.Details["code_sha256"] == wantWarm && e.Details["container_id"] != nil && e.Details["plugin"] == "python"
			case "execution.complete", "container.start", "container.remove":
				seen[e.Event] = seen[e.Event] || e.Success
			}
		}
		return len(seen) == 6 && !slices.Contains(slices.Collect(maps.Values(seen)), false)
	})
	if strings.Contains(string(raw), "PLANTED-CODE") || strings.Contains(string(raw), "PLANTED-TOKEN") {
		t.Fatalf("audit log holds code or a secret:\n%s", raw)
	}
}

// A refused call is audited with the rule's name before the answer comes
// back, never as an execution, and without the values it carried.
func TestRefusalsAudited(t *testing.T) {
	s := testenv.StartServer(t, "")
	cases := []struct {
		args map[string]any
		rule string
	}{
		{map[string]any{"code": "1", "custom_image": "docker.io/library/python:3"}, "image-not-allowed"},
		{map[string]any{"code": "1", "environment": map[string]string{"1BAD": "PLANTED-ENV-7"}}, "env-name"},
		{map[string]any{"code": "1", "environment": map[string]string{"TOKEN": "PLANTED-ENV-8\x00"}}, "env-nul"},
		{map[string]any{"code": "1", "session_id": "../../etc"}, "session-id"},
	}
	for _, tc := range cases {
		res := s.Call(t, "execute_python", tc.args, nil)
		if !res.IsError {
			t.Fatalf("%v: not refused", tc.args)
		}
		raw, _ := os.ReadFile(s.AuditLog)
		found := false
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var e struct {
				Event, Severity string
				Details         map[string]any
			}
			json.Unmarshal([]byte(line), &e)
			event, severity := "request.refused", "warning"
			if tc.rule == "image-not-allowed" { // a container-policy rule
				event, severity = "security.violation", "critical"
			}
			found = found || e.Event == event && e.Severity == severity && e.Details["rule"] == tc.rule && e.Details["tool"] == "execute_python"
		}
		if !found {
			t.Fatalf("no request.refused line with rule %s:\n%s", tc.rule, raw)
		}
	}
	raw, _ := os.ReadFile(s.AuditLog)
	if strings.Contains(string(raw), "PLANTED-ENV") || strings.Contains(string(raw), "execution.request") {
		t.Fatalf("the audit log holds a value, or a refused call as an execution:\n%s", raw)
	}
}
