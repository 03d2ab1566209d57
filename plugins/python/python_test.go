package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// Snippets are the conformance programs in Python.
var Snippets = sdktest.Snippets{
	Language:     "python",
	Print:        "print('hello')",
	Expr:         "x = 41\nx + 1",
	ExprJSON:     "42",
	ExprRepr:     "42",
	OwnFrames:    []string{"runner"},
	SyntaxError:  "x = 1\ny = (\nz = 3",
	SyntaxLine:   2,
	RuntimeError: "a = 1\nb = 0\nc = a / b\n",
	RuntimeLine:  3,
	Sleep:        "import time\ntime.sleep(60)",
	Stderr:       "import sys\nprint('oops', file=sys.stderr)",
}

func localBackend(t *testing.T) backend.Backend {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	return sdktest.Serve(t, Info, New, sdktest.NewLocalHost(t.TempDir()), nil)
}

// The conformance suite in-process over gRPC with a local fake host: fast
// checks of the runner and the shims. Real Podman runs are in test/e2e.
func TestConformanceLocal(t *testing.T) {
	sdktest.RunBackend(t, localBackend(t), Snippets)
}

func TestRunnerDetails(t *testing.T) {
	b := localBackend(t)
	run := func(code string) backend.ExecuteResult {
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: code, Timeout: time.Minute, MaxOutputBytes: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := []struct {
		name  string
		code  string
		check func(backend.ExecuteResult) bool
	}{
		{"non-json value is repr", "object()", func(r backend.ExecuteResult) bool {
			return r.Success && r.ResultIsRepr && strings.HasPrefix(r.ResultRepr, "<object object")
		}},
		{"dict as json", "{'a': [1, 2]}", func(r backend.ExecuteResult) bool { return r.ResultJSON == `{"a": [1, 2]}` }},
		{"none is no result", "None", func(r backend.ExecuteResult) bool { return r.Success && r.ResultJSON == "" && r.ResultRepr == "" }},
		{"statement last", "x = 1", func(r backend.ExecuteResult) bool { return r.Success && r.ResultRepr == "" }},
		{"output capped", "print('x' * 5000)", func(r backend.ExecuteResult) bool {
			return len(r.Stdout) <= 1001 && r.StdoutBytes >= 5000
		}},
		{"sys.exit(3)", "import sys\nsys.exit(3)", func(r backend.ExecuteResult) bool { return !r.Success && r.ExitCode == 3 }},
		{"sys.exit(0)", "import sys\nprint('bye')\nsys.exit(0)", func(r backend.ExecuteResult) bool { return r.Success && r.Stdout == "bye\n" }},
		{"error in function", "def f():\n    return 1/0\n\nf()", func(r backend.ExecuteResult) bool {
			return r.Error != nil && r.Error.Name == "ZeroDivisionError" && r.Error.Line == 2 &&
				strings.Contains(strings.Join(r.Error.Traceback, ""), "return 1/0")
		}},
		{"keyboard interrupt", "raise KeyboardInterrupt", func(r backend.ExecuteResult) bool { return r.Error != nil && r.Error.Name == "KeyboardInterrupt" }},
		{"unicode", "print('héllo ✓')\n'✓'", func(r backend.ExecuteResult) bool { return r.Stdout == "héllo ✓\n" && r.ResultJSON == `"\u2713"` }},
		{"bytes to stdout.buffer", "import sys\nprint('a')\nsys.stdout.buffer.write(b'b\\n')\nprint('c')", func(r backend.ExecuteResult) bool {
			return r.Success && r.Stdout == "a\nb\nc\n" && r.StdoutBytes == 6
		}},
		{"stdout.buffer is capped and counted", "import sys\nsys.stdout.buffer.write(b'x' * 5000)\nsys.stderr.buffer.write(b'y' * 3000)", func(r backend.ExecuteResult) bool {
			return r.Success && r.Stdout == strings.Repeat("x", 1000) && r.StdoutBytes == 5000 && r.Stderr == strings.Repeat("y", 1000) && r.StderrBytes == 3000
		}},
		{"the cap counts text and bytes together", "import sys\nprint('é' * 400)\nsys.stdout.buffer.write(b'z' * 400)\nprint('w' * 10)", func(r backend.ExecuteResult) bool {
			return r.Stdout == strings.Repeat("é", 400)+"\n"+strings.Repeat("z", 199) && r.StdoutBytes == 801+400+11 && len(r.Notices) == 0
		}},
		{"a cap inside a character is a cut, not invalid output", "print('a' + 'é' * 600)", func(r backend.ExecuteResult) bool {
			return r.Stdout == "a"+strings.Repeat("é", 499) && r.StdoutBytes == 1202 && len(r.Notices) == 0
		}},
		{"a real text stream", "import sys\nprint(sys.stdout.fileno(), sys.stdout.isatty(), sys.stdout.encoding, sys.stderr.fileno(), sys.stdout.buffer.fileno())\nsys.stdout.writelines(['a', 'b\\n'])\nsys.stdout.flush()\nprint('e', file=sys.stderr)", func(r backend.ExecuteResult) bool {
			return r.Success && r.Stdout == "1 False utf-8 2 1\nab\n" && r.Stderr == "e\n"
		}},
		{"invalid UTF-8 bytes", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')\n'still here'", func(r backend.ExecuteResult) bool {
			return r.Success && r.Stdout == "\uFFFD ok\n" && r.StdoutBytes == 6 && r.ResultRepr == "'still here'" && strings.Contains(strings.Join(r.Notices, ""), "stdout")
		}},
		{"surrogate escapes", "import sys\nsys.stdout.reconfigure(errors='surrogateescape')\nprint('\\udcff')\n1", func(r backend.ExecuteResult) bool {
			return r.Success && r.Stdout == "\uFFFD\n" && r.ResultJSON == "1" && strings.Contains(strings.Join(r.Notices, ""), "U+FFFD")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := run(c.code); !c.check(r) {
				t.Fatalf("%+v (error %+v)", r, r.Error)
			}
		})
	}
}

// What the plugin declares about its image crosses the gRPC shims, and only
// holds for the image in use: with another image configured, the declared
// version and packages are not claimed, unless the operator states them.
func TestCapabilitiesDescribeTheImageInUse(t *testing.T) {
	ctx := context.Background()
	h := sdktest.NewLocalHost(t.TempDir())
	caps := func(cfg string) backend.Capabilities {
		c, err := sdktest.Serve(t, Info, New, h, []byte(cfg)).Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := caps(`{}`)
	if c.Image != Spec.DefaultImage || c.DefaultImage != Spec.DefaultImage || c.LanguageName != "Python" ||
		c.LanguageVersion != Spec.Runtime.LanguageVersion || len(c.Packages) == 0 || c.Description == "" || c.Stateful {
		t.Fatalf("default: %+v", c)
	}
	c = caps(`{"image": "mcp-forge/custom:x"}`)
	if c.Image != "mcp-forge/custom:x" || c.DefaultImage != Spec.DefaultImage || c.LanguageVersion != "" || len(c.Packages) != 0 {
		t.Fatalf("custom image: %+v", c)
	}
	c = caps(`{"image": "mcp-forge/custom:x", "language_version": "3.12", "packages": ["scipy 1.11"]}`)
	if c.LanguageVersion != "3.12" || len(c.Packages) != 1 || c.Packages[0] != "scipy 1.11" {
		t.Fatalf("stated by the operator: %+v", c)
	}
}

// The resident runner with a warm pool, locally: the conformance suite
// passes, and a warm process serves exactly one run.
func TestWarmLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	h := sdktest.NewLocalHost(t.TempDir())
	b := sdktest.Serve(t, Info, New, h, []byte(`{"warm": 1}`))
	pool := func() backend.WarmPool { return warmPool(t, b) }
	pids := map[string]bool{}
	for i := 0; i < 3; i++ {
		before := waitWarm(t, b, 1)
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "import os\nprint('x')\nos.getpid()", Timeout: time.Minute, MaxOutputBytes: 1000})
		if err != nil || !r.Success || r.Stdout != "x\n" {
			t.Fatalf("%v %+v", err, r)
		}
		if p := pool(); p.Hits != before.Hits+1 {
			t.Fatalf("not a hit: %+v then %+v", before, p)
		}
		if pids[r.ResultJSON] {
			t.Fatalf("process %s served two runs", r.ResultJSON)
		}
		pids[r.ResultJSON] = true
	}
	// Each warm container was clamped to its limits (test/e2e reads the
	// quota from the code).
	if n := h.Clamps(); n < 3 {
		t.Fatalf("%d clamps for 3 warm runs", n)
	}
	sdktest.RunBackend(t, b, Snippets)
}

// warmPool is b's warm pool as it reports it.
func warmPool(t *testing.T, b backend.Backend) backend.WarmPool {
	t.Helper()
	st, err := b.(backend.StatsReporter).Stats(context.Background())
	if err != nil || st.WarmPool == nil {
		t.Fatalf("no warm pool reported: %v", err)
	}
	return *st.WarmPool
}

// waitWarm waits up to 30 s for b's pool to hold n ready containers.
func waitWarm(t *testing.T, b backend.Backend, n int) backend.WarmPool {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if p := warmPool(t, b); p.Warm == n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool never had %d warm: %+v", n, warmPool(t, b))
		}
	}
}

// A run of a sandbox class (a sandbox grant with its class's pool grant)
// starts cold the first time; the pool then keeps containers of the class,
// created with the pool grant, and the next run of the class is served
// warm once the core gave the container to that run's own grant. A grant
// without a pool grant always runs cold.
func TestWarmSandboxClassLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	h := sdktest.NewLocalHost(t.TempDir())
	b := sdktest.Serve(t, Info, New, h, []byte(`{"warm": 1}`))
	pool := func() backend.WarmPool { return warmPool(t, b) }
	run := func(grant, poolGrant string) backend.WarmPool {
		t.Helper()
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "print('x')", Timeout: time.Minute, MaxOutputBytes: 1000, SandboxGrant: grant, SandboxPoolGrant: poolGrant})
		if err != nil || !r.Success || r.Stdout != "x\n" {
			t.Fatalf("%v %+v", err, r)
		}
		return pool()
	}
	waitWarm(t, b, 1)
	before := pool()
	if p := run("run1", "class-g"); p.Hits != before.Hits {
		t.Fatalf("the class's first run was served warm: %+v", p)
	}
	waitWarm(t, b, 2)
	before = pool()
	if p := run("run2", "class-g"); p.Hits != before.Hits+1 {
		t.Fatalf("the class's second run was not served warm: %+v then %+v", before, p)
	}
	claims := h.Claims()
	if len(claims) != 1 || claims[0].CreatedWith != "class-g" || claims[0].For != "run2" {
		t.Fatalf("claims %+v; want one container created with class-g given to run2", claims)
	}
	before = pool()
	if p := run("run3", ""); p.Hits != before.Hits {
		t.Fatalf("a sandbox grant without a pool grant was served warm: %+v", p)
	}
}

// readsHost records the plugin's reads of a container's files; with
// slow set it reads slowly, so that a removal racing the read shows, and
// records reads of containers already removed.
type readsHost struct {
	*sdktest.LocalHost
	slow    bool
	mu      sync.Mutex
	reads   []string
	removed map[string]bool
	late    []string
}

func (h *readsHost) Sandbox() host.Sandbox { return h }

func (h *readsHost) Remove(ctx context.Context, id string) error {
	h.mu.Lock()
	h.removed[id] = true
	h.mu.Unlock()
	return h.LocalHost.Remove(ctx, id)
}

func (h *readsHost) ReadFiles(ctx context.Context, id, subdir string, maxFile, maxTotal int64) ([]host.File, error) {
	if h.slow {
		time.Sleep(50 * time.Millisecond) // widens the window a removal could take
	}
	h.mu.Lock()
	h.reads = append(h.reads, subdir)
	if h.removed[id] {
		h.late = append(h.late, subdir)
	}
	h.mu.Unlock()
	return h.LocalHost.ReadFiles(ctx, id, subdir, maxFile, maxTotal)
}

// A used container is removed only after its output is read: removing it
// sooner (with its workspace) lost a warm run's stdout now and then.
func TestOutputReadBeforeRemoval(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	for _, warm := range []string{"0", "1"} {
		h := &readsHost{LocalHost: sdktest.NewLocalHost(t.TempDir()), slow: true, removed: map[string]bool{}}
		b := sdktest.Serve(t, Info, New, h, []byte(`{"warm": `+warm+`}`))
		for i := 0; i < 3; i++ {
			r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "print('out')", Timeout: time.Minute})
			if err != nil || r.Stdout != "out\n" {
				t.Fatalf("warm=%s: %v %+v", warm, err, r)
			}
		}
		h.mu.Lock()
		late := h.late
		h.mu.Unlock()
		if len(late) > 0 {
			t.Fatalf("warm=%s: read %v of removed containers", warm, late)
		}
	}
}

// A warm run's output and images come in the runner's answer: the plugin
// reads no file (on Kubernetes each read is a round trip through the API
// server). What the runner cannot give (a stdout the code replaced, images
// over the answer's budget) is read from the files, to the same result.
func TestWarmAnswerCarriesOutput(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	const img = "import os\nopen(os.path.join(os.environ['FORGE_OUT'], 'a.png'), 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' * %d)\n"
	cases := []struct {
		name, code     string
		stdout, stderr string
		imageBytes     int
		reads          []string
	}{
		{"output and an image", fmt.Sprintf(img, 10) + "print('out')\nimport sys; print('err', file=sys.stderr)", "out\n", "err\n", 80, nil},
		{"nothing", "1", "", "", 0, nil},
		{"output over the cap", "print('x' * 5000)", strings.Repeat("x", 1000), "", 0, nil},
		{"stdout replaced", "import os\nprint('before', flush=True)\nos.dup2(os.open('/dev/null', os.O_WRONLY), 1)\nprint('gone')", "before\n", "", 0, []string{"meta"}},
		{"images over the budget", fmt.Sprintf(img, 150_000) + "print('big')", "big\n", "", 1_200_000, []string{"out"}},
	}
	h := &readsHost{LocalHost: sdktest.NewLocalHost(t.TempDir()), removed: map[string]bool{}}
	b := sdktest.Serve(t, Info, New, h, []byte(`{"warm": 1}`))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if st, _ := b.(backend.StatsReporter).Stats(context.Background()); st.WarmPool != nil && st.WarmPool.Warm == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("pool never warm")
				}
			}
			h.mu.Lock()
			h.reads = nil
			h.mu.Unlock()
			r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: c.code, Timeout: time.Minute, MaxOutputBytes: 1000, MaxImageBytes: 2 << 20})
			if err != nil || r.Error != nil || r.Stdout != c.stdout || r.Stderr != c.stderr {
				t.Fatalf("%v %+v", err, r)
			}
			if c.imageBytes > 0 && (len(r.Images) != 1 || len(r.Images[0].Data) != c.imageBytes || r.Images[0].Name != "a.png") {
				t.Fatalf("images %d; want a.png of %d bytes: %q", len(r.Images), c.imageBytes, r.Notices)
			}
			h.mu.Lock()
			reads := h.reads
			h.mu.Unlock()
			if !slices.Equal(reads, c.reads) {
				t.Errorf("read %v; want %v", reads, c.reads)
			}
		})
	}
}

// A stateless run's output reaches the core while the run goes on, over
// the plugin's gRPC connection, cold and warm: the first line comes seconds
// before the answer, as the program's own text, and nothing after it.
func TestStreamLocal(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	if _, err := exec.LookPath("tail"); err != nil {
		t.Skip("tail not on PATH")
	}
	for _, warm := range []string{"0", "1"} {
		t.Run("warm="+warm, func(t *testing.T) {
			b := sdktest.Serve(t, Info, New, sdktest.NewLocalHost(t.TempDir()), []byte(`{"warm": `+warm+`}`))
			sb, ok := b.(backend.StreamingBackend)
			if !ok {
				t.Fatalf("the core's client %T is not a backend.StreamingBackend", b)
			}
			type event struct {
				at time.Time
				backend.StreamEvent
			}
			var mu sync.Mutex
			var got []event
			var returned bool
			code := "import sys, time\nprint('first line')\nprint('to stderr', file=sys.stderr)\ntime.sleep(3)\nprint('second line')"
			r, err := sb.ExecuteStream(context.Background(), backend.ExecuteRequest{Code: code, Timeout: time.Minute, MaxOutputBytes: 1000},
				func(ev backend.StreamEvent) {
					mu.Lock()
					defer mu.Unlock()
					if returned {
						t.Errorf("event after the result: %+v", ev)
					}
					got = append(got, event{time.Now(), ev})
				})
			answered := time.Now()
			mu.Lock()
			returned = true
			mu.Unlock()
			if err != nil || !r.Success || r.Stdout != "first line\nsecond line\n" || r.Stderr != "to stderr\n" {
				t.Fatalf("%v %+v", err, r)
			}
			var out, errs string
			var first time.Time
			for _, ev := range got {
				switch ev.Name {
				case host.Stdout:
					out += ev.Text
					if first.IsZero() && strings.Contains(out, "first line\n") {
						first = ev.at
					}
				case host.Stderr:
					errs += ev.Text
				}
			}
			if first.IsZero() || answered.Sub(first) < time.Second {
				t.Fatalf("first line streamed at %v, answer at %v (events %+v)", first, answered, got)
			}
			if !strings.HasPrefix("first line\nsecond line\n", out) || !strings.HasPrefix("to stderr\n", errs) || errs == "" {
				t.Errorf("streamed stdout %q, stderr %q: not the program's own output", out, errs)
			}
		})
	}
}

// A program printing a million lines sends a few events, not a million,
// and no more than its output cap in all.
func TestStreamLocalBounded(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	if _, err := exec.LookPath("tail"); err != nil {
		t.Skip("tail not on PATH")
	}
	b := sdktest.Serve(t, Info, New, sdktest.NewLocalHost(t.TempDir()), []byte(`{"warm": 0}`))
	const limit = 10_000
	var events, total int
	code := "import time\ntime.sleep(0.7)\nfor i in range(1000000):\n    print(i)\ntime.sleep(1)"
	r, err := b.(backend.StreamingBackend).ExecuteStream(context.Background(), backend.ExecuteRequest{Code: code, Timeout: time.Minute, MaxOutputBytes: limit},
		func(ev backend.StreamEvent) { events, total = events+1, total+len(ev.Text) })
	if err != nil || !r.Success || r.StdoutBytes < 6_000_000 {
		t.Fatalf("%v %+v", err, r.Error)
	}
	if events == 0 || events > 20 || total > limit {
		t.Fatalf("%d events of %d bytes in all for a million lines, want a few and at most %d bytes", events, total, limit)
	}
	t.Logf("a million lines: %d events, %d bytes", events, total)
}

// A cold run warms up beyond its quota only when nothing of the user's
// reaches its container before the code: with an environment of the
// user's it is created within its limits (no clamp to make).
func TestColdWarmUpOnlyWithoutUserInput(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH")
	}
	h := sdktest.NewLocalHost(t.TempDir())
	b := sdktest.Serve(t, Info, New, h, []byte(`{"warm": 0}`))
	run := func(env map[string]string) {
		t.Helper()
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "1", Env: env, Timeout: time.Minute, MaxOutputBytes: 1000})
		if err != nil || !r.Success {
			t.Fatalf("%v %+v", err, r)
		}
	}
	run(nil)
	if n := h.Clamps(); n != 1 {
		t.Fatalf("a plain cold run: %d clamps, want 1", n)
	}
	run(map[string]string{"PYTHONPATH": "/tmp"})
	if n := h.Clamps(); n != 1 {
		t.Fatalf("a cold run with the user's environment was given a warm-up (%d clamps)", n)
	}
}
