package e2e

// Hostile output and hostile sizes at the plugin boundary (issue 10): what
// user code prints, how much code it sends, what images it makes, and a
// server that dies without a chance to end its plugins.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/test/testenv"
)

func hasNotice(o out, want string) bool {
	for _, n := range o.Notices {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}

func images(res *mcp.CallToolResult) []*mcp.ImageContent {
	var ims []*mcp.ImageContent
	for _, c := range res.Content {
		if im, ok := c.(*mcp.ImageContent); ok {
			ims = append(ims, im)
		}
	}
	return ims
}

// Output that is not UTF-8 crosses the plugin boundary as U+FFFD with a
// notice; the result (value, other output) is never lost.
func TestInvalidUTF8Output(t *testing.T) {
	testenv.Parallel(t)
	s := testenv.StartServer(t, "[execution]\nmax_output = \"1k\"\n")
	cases := []struct {
		name, tool, session, code string
		check                     func(t *testing.T, o out)
	}{
		{"python bytes", "execute_python", "", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')\nsys.stderr.buffer.write(b'err \\xc3\\n')\n6 * 7", func(t *testing.T, o out) {
			if o.Stdout != "\uFFFD ok\n" || o.Stderr != "err \uFFFD\n" || o.Result != "42" || !hasNotice(o, "in stderr, stdout were replaced") {
				t.Errorf("%+v", o)
			}
		}},
		{"python surrogate escapes", "execute_python", "", "import sys\nsys.stdout.reconfigure(errors='surrogateescape')\nprint('\\udcff', 'x')\nraise ValueError(b'\\xff'.decode('utf-8', 'surrogateescape'))", func(t *testing.T, o out) {
			if o.Stdout != "\uFFFD x\n" || o.Error == nil || o.Error.Type != "ValueError" || o.Error.Line != 4 || !hasNotice(o, "U+FFFD") {
				t.Errorf("%+v %+v", o, o.Error)
			}
		}},
		{"python output cut inside a character", "execute_python", "", "print('a' + 'é' * 2000)", func(t *testing.T, o out) {
			if o.Stdout != "a"+strings.Repeat("é", 511) || !o.Truncated || len(o.Notices) != 0 {
				t.Errorf("%q %+v", o.Stdout, o.Notices)
			}
		}},
		{"r raw byte", "execute_r", "", "cat(rawToChar(as.raw(c(104, 105, 255, 10))))\n21 * 2", func(t *testing.T, o out) {
			if o.Stdout != "hi\uFFFD\n" || o.Result == "" || !hasNotice(o, "stdout") {
				t.Errorf("%+v", o)
			}
		}},
		{"python session surrogate", "execute_python", "u8", "print('\\udcff ok')\n6 * 7", func(t *testing.T, o out) {
			if !strings.Contains(o.Stdout, "\uFFFD ok") || o.Result != "42" || !hasNotice(o, "U+FFFD") {
				t.Errorf("%+v", o)
			}
		}},
		{"python session output cut inside a character", "execute_python", "u8", "print('a' + 'é' * 2000)", func(t *testing.T, o out) {
			if o.Stdout != "a"+strings.Repeat("é", 511) || !o.Truncated {
				t.Errorf("%q %+v", o.Stdout, o.Notices)
			}
		}},
		{"python session still alive", "execute_python", "u8", "6 * 7", func(t *testing.T, o out) {
			if o.Result != "42" || len(o.Notices) != 0 {
				t.Errorf("%+v %+v", o, o.Error)
			}
		}},
		{"python session error message", "execute_python", "u8", "raise ValueError('bad \\udcff')", func(t *testing.T, o out) {
			if o.Error == nil || o.Error.Type != "ValueError" || !strings.Contains(o.Error.Message, "\uFFFD") || !hasNotice(o, "U+FFFD") {
				t.Errorf("%+v %+v", o, o.Error)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]any{"code": c.code}
			if c.session != "" {
				args["session_id"] = c.session
			}
			var o out
			res := s.Call(t, c.tool, args, &o)
			if o.Error != nil && (o.Error.Type == "ServerError" || o.Error.Type == "RequestError") {
				t.Fatalf("the result was lost: %s", testenv.Text(res))
			}
			c.check(t, o)
		})
	}
}

// sys.stdout is a real text stream in stateless runs: .buffer works and is
// capped and counted with the text written.
func TestPythonStdoutBuffer(t *testing.T) {
	s := testenv.StartServer(t, "[execution]\nmax_output = \"1k\"\n")
	code := `import sys
print(sys.stdout.fileno(), sys.stdout.isatty(), sys.stdout.encoding, sys.stdout.buffer.fileno())
sys.stdout.writelines(['a', 'b\n'])
sys.stdout.flush()
sys.stdout.buffer.write(b'bytes\n')
sys.stdout.buffer.flush()
print('to stderr', file=sys.stderr)
sys.stderr.buffer.write(b'e' * 5000)
len(sys.stdout.buffer.write(b'x' * 3000).to_bytes(2, 'big'))`
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": code}, &o)
	if res.IsError {
		t.Fatalf("%s", testenv.Text(res))
	}
	head := "1 False utf-8 1\nab\nbytes\n"
	// Cut where its JSON text reaches max_output: its three newlines take two bytes each.
	if !strings.HasPrefix(o.Stdout, head) || len(o.Stdout) != 1021 || o.Stdout[len(head):] != strings.Repeat("x", 1021-len(head)) || o.StdoutBytes != int64(len(head)+3000) {
		t.Errorf("stdout %q (%d bytes reported)", o.Stdout, o.StdoutBytes)
	}
	// Cut where its JSON text reaches max_output: the newline takes two.
	if !strings.HasPrefix(o.Stderr, "to stderr\neee") || len(o.Stderr) != 1023 || o.StderrBytes != 10+5000 || !o.Truncated {
		t.Errorf("stderr %q (%d bytes reported)", o.Stderr, o.StderrBytes)
	}
	if o.Result != "2" {
		t.Errorf("result %v", o.Result)
	}
}

// Code of exactly execution.max_code_size runs; one byte more is a clear
// request error naming the setting, not a gRPC error. Output up to
// execution.max_output and an image of execution.max_image_size come back.
func TestCodeAndOutputAtTheLimits(t *testing.T) {
	testenv.Parallel(t)
	s := testenv.StartServer(t, "")
	const maxCode = 4 << 20 // the default execution.max_code_size, "4m"
	// The runner keeps the source for tracebacks: all of it arrived.
	body := "print('ran')\nimport linecache\nlen(''.join(linecache.getlines('<code>')))\n"
	code := "#" + strings.Repeat("x", maxCode-len(body)-2) + "\n" + body
	if len(code) != maxCode {
		t.Fatalf("test code is %d bytes", len(code))
	}
	var o out
	res := s.Call(t, "execute_python", map[string]any{"code": code}, &o)
	if res.IsError || o.Stdout != "ran\n" || o.Result != strconv.Itoa(maxCode) {
		t.Fatalf("code of max_code_size: %.500s (result %v)", testenv.Text(res), o.Result)
	}
	o = out{}
	res = s.Call(t, "execute_python", map[string]any{"code": code + "#"}, &o)
	text := testenv.Text(res)
	if !res.IsError || o.Error == nil || o.Error.Type != "RequestError" || !strings.Contains(text, "execution.max_code_size") || strings.Contains(strings.ToLower(text), "grpc") {
		t.Fatalf("one byte over: %s", text)
	}
	// Defaults: max_output "1m" per stream, max_image_size "5m". (Four such
	// images would pass the plugin boundary too, but a reply that large
	// exceeds go-sdk clients' 16 MiB frame limit.)
	code = "import sys, random\nsys.stdout.write('o' * (1 << 20))\nsys.stderr.write('e' * (1 << 20))\n" +
		"open('a.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + random.randbytes((5 << 20) - 8))\n"
	o = out{}
	res = s.Call(t, "execute_python", map[string]any{"code": code}, &o)
	// That much output travels once, in the text (output_in_text).
	text = testenv.Text(res)
	if res.IsError || !o.OutputInText || o.Stdout != "" || o.StdoutBytes != 1<<20 || o.StderrBytes != 1<<20 || o.Truncated ||
		!strings.Contains(text, strings.Repeat("o", 1<<20)) || !strings.Contains(text, strings.Repeat("e", 1<<20)) {
		t.Fatalf("stdout %d (%d written), stderr %d bytes, output_in_text %v, truncated %v: %.300s", len(o.Stdout), o.StdoutBytes, len(o.Stderr), o.OutputInText, o.Truncated, text)
	}
	if ims := images(res); len(ims) != 1 || len(ims[0].Data) != 5<<20 {
		t.Errorf("%d images; notices %q", len(ims), o.Notices)
	}
}

const hostileSVG = `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="20" height="20" onload="alert(1)">` +
	`<script>alert(document.domain)</script><a xlink:href="javascript:alert(2)"><rect width="10" height="10" fill="red"/></a>` +
	`<foreignObject><iframe xmlns="http://www.w3.org/1999/xhtml" src="https://evil.example/"/></foreignObject></svg>`

func checkSVG(t *testing.T, data []byte, want string) {
	t.Helper()
	s := string(data)
	for _, bad := range []string{"script", "alert", "onload", "foreignObject", "evil.example"} {
		if strings.Contains(s, bad) {
			t.Errorf("returned SVG holds %q:\n%.2000s", bad, s)
		}
	}
	if !strings.Contains(s, want) {
		t.Errorf("returned SVG lost %q:\n%.2000s", want, s)
	}
}

// SVG images come back sanitised; an SVG that cannot be parsed does not
// come back as an image.
func TestSVGImagesSanitised(t *testing.T) {
	testenv.Parallel(t)
	s := testenv.StartServer(t, "")
	t.Run("stateless", func(t *testing.T) {
		code := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.savefig('plot.svg')\nplt.close('all')\n" +
			fmt.Sprintf("open('hostile.svg', 'w').write(%q)\nopen('broken.svg', 'w').write('<svg><script>alert(1)')\n", hostileSVG)
		var o out
		res := s.Call(t, "execute_python", map[string]any{"code": code}, &o)
		if res.IsError {
			t.Fatal(testenv.Text(res))
		}
		byName := map[string][]byte{}
		for i, im := range images(res) {
			if im.MIMEType != "image/svg+xml" {
				t.Errorf("image %s is %s", o.Images[i], im.MIMEType)
			}
			byName[o.Images[i]] = im.Data
		}
		if len(byName) != 2 || byName["plot.svg"] == nil || byName["hostile.svg"] == nil {
			t.Fatalf("images %v; notices %q", o.Images, o.Notices)
		}
		checkSVG(t, byName["plot.svg"], "<path")
		checkSVG(t, byName["hostile.svg"], `<rect width="10" height="10" fill="red">`)
		if !hasNotice(o, "hostile.svg: active content was removed") || !hasNotice(o, "broken.svg was not returned") {
			t.Errorf("notices %q", o.Notices)
		}
	})
	t.Run("session", func(t *testing.T) {
		code := "from IPython.display import SVG, display\nimport matplotlib.pyplot as plt\n%config InlineBackend.figure_formats = ['svg']\n" +
			fmt.Sprintf("display(SVG(%q))\nplt.plot([1, 2], [3, 4])\nplt.show()\n", hostileSVG)
		var o out
		res := s.Call(t, "execute_python", map[string]any{"code": code, "session_id": "svg"}, &o)
		if res.IsError {
			t.Fatal(testenv.Text(res))
		}
		ims := images(res)
		if len(ims) != 2 || ims[0].MIMEType != "image/svg+xml" || ims[1].MIMEType != "image/svg+xml" {
			t.Fatalf("%d images; notices %q", len(ims), o.Notices)
		}
		checkSVG(t, ims[0].Data, `<rect width="10" height="10" fill="red">`)
		checkSVG(t, ims[1].Data, "<path")
		if !hasNotice(o, "active content was removed") {
			t.Errorf("notices %q", o.Notices)
		}
	})
}

// procState is a process's state letter from /proc, "" if it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// A server killed with SIGKILL cannot end its plugins; they end by
// themselves.
func TestPluginsDieWithTheServer(t *testing.T) {
	s := testenv.StartServer(t, "")
	if res := s.Call(t, "execute_python", map[string]any{"code": "1"}, nil); res.IsError {
		t.Fatal(testenv.Text(res))
	}
	var plugins []int
	for _, pid := range testenv.ChildPids(s.Cmd.Process.Pid) {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if strings.Contains(string(cmdline), "mcp-forge-plugin-") {
			plugins = append(plugins, pid)
		}
	}
	if len(plugins) < 4 {
		t.Fatalf("found %d plugin processes of the server, want the 4 built-in ones", len(plugins))
	}
	// Whatever happens, leave no process of ours behind.
	t.Cleanup(func() {
		for _, pid := range plugins {
			if st := procState(pid); st != "" && st != "Z" {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	s.Cmd.Process.Signal(syscall.SIGKILL)
	s.Cmd.Wait()
	killed := time.Now()
	deadline := killed.Add(5 * time.Second)
	for {
		var alive []string
		for _, pid := range plugins {
			// A zombie has exited; only reaping (by init) is left.
			if st := procState(pid); st != "" && st != "Z" {
				alive = append(alive, fmt.Sprintf("%d (%s)", pid, st))
			}
		}
		if len(alive) == 0 {
			t.Logf("all %d plugins exited %s after the server was killed", len(plugins), time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin processes still running 5 s after the server was killed: %v", alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
