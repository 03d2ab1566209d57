package sdktest_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// fake is a backend whose results the test writes; Execute may first use
// the host, as a real backend does.
type fake struct {
	h       host.Host
	execute func(h host.Host, req backend.ExecuteRequest) (backend.ExecuteResult, error)
	events  []backend.StreamEvent
}

func (f *fake) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"fake"}, Stateful: true}, nil
}

func (f *fake) Execute(_ context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return f.execute(f.h, req)
}

func (f *fake) OpenSession(context.Context, backend.OpenSessionRequest) (backend.SessionInfo, error) {
	return backend.SessionInfo{}, nil
}

func (f *fake) ExecuteInSession(_ context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	for _, ev := range f.events {
		emit(ev)
	}
	return f.execute(f.h, req)
}

func (f *fake) Interrupt(context.Context, string) error                     { return nil }
func (f *fake) Inspect(context.Context, string) ([]backend.Variable, error) { return nil, nil }
func (f *fake) RestartSession(context.Context, string) error                { return nil }
func (f *fake) CloseSession(context.Context, string) error                  { return nil }

func serveFake(t *testing.T, maxMessage int, f *fake) backend.SessionBackend {
	t.Helper()
	return serveFakeOn(t, sdktest.NewLocalHost(t.TempDir()), maxMessage, f)
}

// serveFakeOn is serveFake with the host services of lh.
func serveFakeOn(t *testing.T, lh *sdktest.LocalHost, maxMessage int, f *fake) backend.SessionBackend {
	t.Helper()
	factory := func(h host.Host, _ backend.Config) (backend.Backend, error) {
		f.h = h
		return f, nil
	}
	b := sdktest.ServeLimited(t, plugin.Info{Name: "fake", Version: "0.0.1"}, factory, lh, nil, maxMessage)
	return b.(backend.SessionBackend)
}

func result(r backend.ExecuteResult) func(host.Host, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	return func(host.Host, backend.ExecuteRequest) (backend.ExecuteResult, error) { return r, nil }
}

// allValid fails on any string of r that is not valid UTF-8.
func allValid(t *testing.T, r backend.ExecuteResult) {
	t.Helper()
	strs := []string{r.Stdout, r.Stderr, r.ResultJSON, r.ResultRepr}
	strs = append(strs, r.Notices...)
	for k, v := range r.Rich {
		strs = append(strs, k, v)
	}
	for _, im := range r.Images {
		strs = append(strs, im.Name, im.MIMEType)
	}
	if r.Error != nil {
		strs = append(strs, r.Error.Name, r.Error.Message)
		strs = append(strs, r.Error.Traceback...)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			t.Errorf("invalid UTF-8 crossed the boundary: %q", s)
		}
	}
}

var png = []byte("\x89PNG\r\n\x1a\n-not-really-but-signed")

// Output that is not UTF-8, anywhere in a result, must not lose the
// result: it comes back with U+FFFD and a notice naming where.
func TestInvalidUTF8CrossesTheBoundary(t *testing.T) {
	bad := backend.ExecuteResult{
		Success: false, Stdout: "\xff\xfe ok\n", Stderr: "warn \xed\xb3\xbf\n", StdoutBytes: 6, StderrBytes: 9,
		ResultJSON: "\"\xff\"", ResultRepr: "b'\xff' \xc3", ResultIsRepr: true,
		Error:   &backend.ExecError{Name: "Err\xff", Message: "bad \xfe", Traceback: []string{"line \xff\n", "ok\n"}, Line: 2},
		Notices: []string{"note \xff"},
		Rich:    map[string]string{"text/html": "<b>\xff</b>", "x/\xff": "v"},
		Images:  []backend.Image{{Name: "plot\xff.png", MIMEType: "image/png", Data: png}},
	}
	b := serveFake(t, plugin.DefaultMaxMessage, &fake{execute: result(bad), events: []backend.StreamEvent{{Name: "stdout", Text: "\xffstream"}, {Name: "stderr", Text: "fine"}}})
	check := func(t *testing.T, r backend.ExecuteResult) {
		allValid(t, r)
		if r.Stdout != "\uFFFD ok\n" || !strings.Contains(r.ResultRepr, "\uFFFD") || r.Error == nil || r.Error.Line != 2 ||
			r.Error.Traceback[0] != "line \uFFFD\n" || r.Rich["text/html"] != "<b>\uFFFD</b>" || len(r.Images) != 1 || !bytes.Equal(r.Images[0].Data, png) {
			t.Errorf("result not carried intact: %+v %+v", r, r.Error)
		}
		notice := strings.Join(r.Notices, "\n")
		for _, field := range []string{"stdout", "stderr", "result_repr", "error.traceback", "rich", "images.name"} {
			if !strings.Contains(notice, field) {
				t.Errorf("notice does not name %s: %q", field, notice)
			}
		}
		if !strings.Contains(notice, "U+FFFD") {
			t.Errorf("no notice about replaced bytes: %q", notice)
		}
	}
	t.Run("execute", func(t *testing.T) {
		r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
		if err != nil {
			t.Fatalf("the result was lost: %v", err)
		}
		check(t, r)
	})
	t.Run("session", func(t *testing.T) {
		var events []backend.StreamEvent
		r, err := b.ExecuteInSession(context.Background(), backend.ExecuteRequest{Code: "x", SessionID: "s"}, func(ev backend.StreamEvent) { events = append(events, ev) })
		if err != nil {
			t.Fatalf("the result was lost: %v", err)
		}
		check(t, r)
		if len(events) != 2 || events[0].Text != "\uFFFDstream" || events[1].Text != "fine" {
			t.Errorf("stream events: %q", events)
		}
	})
	t.Run("session stream only", func(t *testing.T) {
		b := serveFake(t, plugin.DefaultMaxMessage, &fake{execute: result(backend.ExecuteResult{Success: true}), events: []backend.StreamEvent{{Name: "stdout", Text: "\xff"}}})
		r, err := b.ExecuteInSession(context.Background(), backend.ExecuteRequest{Code: "x", SessionID: "s"}, func(backend.StreamEvent) {})
		if err != nil || !strings.Contains(strings.Join(r.Notices, ""), "stdout") {
			t.Fatalf("%v: notices %q", err, r.Notices)
		}
	})
	t.Run("error message", func(t *testing.T) {
		b := serveFake(t, plugin.DefaultMaxMessage, &fake{execute: func(host.Host, backend.ExecuteRequest) (backend.ExecuteResult, error) {
			return backend.ExecuteResult{}, host.Errorf(host.KindInvalid, "kernel output: \xff\xfe")
		}})
		_, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
		if err == nil || !strings.Contains(err.Error(), "kernel output: \uFFFD") {
			t.Fatalf("error %v", err)
		}
	})
}

// A byte cap that cut output inside a character is a cut, not invalid
// output: the partial character goes, and no notice claims bad bytes.
func TestCutOutputIsNotInvalid(t *testing.T) {
	b := serveFake(t, plugin.DefaultMaxMessage, &fake{execute: result(backend.ExecuteResult{Success: true, Stdout: "ok é"[:4], StdoutBytes: 5000, Stderr: "\xff\xff\xff\xff", StderrBytes: 5000})})
	r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "ok " {
		t.Errorf("stdout %q", r.Stdout)
	}
	// Stderr was cut and invalid: replaced, and still no longer than its cap.
	if r.Stderr != "\uFFFD" || int64(len(r.Stderr)) >= r.StderrBytes {
		t.Errorf("stderr %q", r.Stderr)
	}
	if n := strings.Join(r.Notices, ""); strings.Contains(n, "stdout") || !strings.Contains(n, "stderr") {
		t.Errorf("notices %q", r.Notices)
	}
}

// Code at execution.max_code_size goes to the plugin and, with a runner,
// to the host; a result with capped output and images of the largest size
// comes back: nothing on the way keeps gRPC's 4 MiB default.
func TestMessagesAtTheLimits(t *testing.T) {
	const maxCode, maxOut, maxImg = 4 << 20, 1 << 20, 5 << 20
	limit := plugin.MessageLimit(maxCode, maxOut, maxImg)
	image := append(bytes.Clone(png), bytes.Repeat([]byte{'x'}, maxImg-len(png))...)
	runner := bytes.Repeat([]byte("# runner\n"), 8<<10)
	b := serveFake(t, limit, &fake{execute: func(h host.Host, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
		ctx := context.Background()
		files := map[string][]byte{"in/code": []byte(req.Code), "in/runner": runner}
		for i := range 4 {
			files["out/img"+strconv.Itoa(i)+".png"] = image
		}
		c, err := h.Sandbox().Create(ctx, host.Intent{Command: []string{"true"}, Files: files, Mounts: []host.Mount{{Subdir: "in", Target: "/in"}, {Subdir: "out", Target: "/out"}}})
		if err != nil {
			return backend.ExecuteResult{}, err
		}
		got, err := h.Sandbox().ReadFiles(ctx, c.ID, "out", maxImg, 4*maxImg)
		if err != nil {
			return backend.ExecuteResult{}, err
		}
		res := backend.ExecuteResult{Success: true, ResultJSON: strconv.Itoa(len(req.Code)),
			Stdout: strings.Repeat("o", maxOut), Stderr: strings.Repeat("e", maxOut), StdoutBytes: maxOut, StderrBytes: maxOut}
		for _, f := range got {
			res.Images = append(res.Images, backend.Image{Name: f.Name, MIMEType: "image/png", Data: f.Data})
		}
		return res, nil
	}})
	code := strings.Repeat("#", maxCode)
	r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: code})
	if err != nil {
		t.Fatalf("code of max_code_size: %v", err)
	}
	if r.ResultJSON != strconv.Itoa(maxCode) || len(r.Stdout) != maxOut || len(r.Stderr) != maxOut || len(r.Images) != 4 || len(r.Notices) != 0 {
		t.Fatalf("result: json %s, stdout %d, stderr %d, %d images, notices %q", r.ResultJSON, len(r.Stdout), len(r.Stderr), len(r.Images), r.Notices)
	}
	for _, im := range r.Images {
		if len(im.Data) != maxImg {
			t.Errorf("image %s: %d bytes", im.Name, len(im.Data))
		}
	}
}

// A result larger than any message is shrunk with a notice, not lost.
func TestOversizedResultIsShrunk(t *testing.T) {
	const limit = 6 << 20
	big := append(bytes.Clone(png), bytes.Repeat([]byte{'x'}, 3<<20)...)
	b := serveFake(t, limit, &fake{execute: result(backend.ExecuteResult{
		Success: true, Stdout: "kept\n", StdoutBytes: 5, ResultJSON: "\"" + strings.Repeat("r", 2<<20) + "\"", ResultRepr: strings.Repeat("r", 5<<20),
		Images: []backend.Image{{Name: "big.png", MIMEType: "image/png", Data: big}, {Name: "small.png", MIMEType: "image/png", Data: png}},
		Rich:   map[string]string{"text/html": strings.Repeat("h", 2<<20)},
	})})
	r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
	if err != nil {
		t.Fatalf("the result was lost: %v", err)
	}
	notice := strings.Join(r.Notices, "\n")
	if r.Stdout != "kept\n" || len(r.Images) != 1 || r.Images[0].Name != "small.png" || len(r.ResultRepr) >= 5<<20 || len(r.ResultRepr) == 0 ||
		!strings.Contains(notice, "left out image big.png") || !strings.Contains(notice, "shortened result_repr") {
		t.Fatalf("stdout %q, %d images, json %d bytes, repr %d bytes, notices %q", r.Stdout, len(r.Images), len(r.ResultJSON), len(r.ResultRepr), r.Notices)
	}
}

// Every result's images are checked on the core's side, whichever plugin
// sent them: SVG without active content, unparseable SVG and mislabelled
// files not returned as images.
func TestImagesCheckedAtTheCore(t *testing.T) {
	svg := `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script><rect width="1"/></svg>`
	b := serveFake(t, plugin.DefaultMaxMessage, &fake{execute: result(backend.ExecuteResult{Success: true, Images: []backend.Image{
		{Name: "a.svg", MIMEType: "image/svg+xml", Data: []byte(svg)},
		{Name: "broken.svg", MIMEType: "image/svg+xml", Data: []byte(`<svg><script>alert(1)`)},
		{Name: "fake.png", MIMEType: "image/png", Data: []byte(svg)},
		{Name: "ok.png", MIMEType: "image/png", Data: png},
	}})})
	for _, session := range []bool{false, true} {
		var r backend.ExecuteResult
		var err error
		if session {
			r, err = b.ExecuteInSession(context.Background(), backend.ExecuteRequest{Code: "x", SessionID: "s"}, nil)
		} else {
			r, err = b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Images) != 2 || r.Images[0].Name != "a.svg" || r.Images[1].Name != "ok.png" {
			t.Fatalf("images %+v", r.Images)
		}
		if s := string(r.Images[0].Data); strings.Contains(s, "alert") || !strings.Contains(s, "<rect") {
			t.Errorf("svg returned as %s", s)
		}
		notice := strings.Join(r.Notices, "\n")
		for _, want := range []string{"a.svg: active content was removed", "<script> element", "onload attribute", "broken.svg was not returned", "could not be parsed", "fake.png was not returned"} {
			if !strings.Contains(notice, want) {
				t.Errorf("notices lack %q: %s", want, notice)
			}
		}
	}
}

// The host services cross the same boundary: a file that user code named
// with bytes that are not UTF-8 must not make ReadFiles fail (and with it
// every image of the run).
func TestHostServicesCarryInvalidNames(t *testing.T) {
	lh := sdktest.NewLocalHost(t.TempDir())
	b := serveFakeOn(t, lh, plugin.DefaultMaxMessage, &fake{execute: func(h host.Host, _ backend.ExecuteRequest) (backend.ExecuteResult, error) {
		ctx := context.Background()
		c, err := h.Sandbox().Create(ctx, host.Intent{Command: []string{"true"}, Mounts: []host.Mount{{Subdir: "out", Target: "/out"}}})
		if err != nil {
			return backend.ExecuteResult{}, err
		}
		// As code in the container would: straight into its workspace.
		if err := os.WriteFile(filepath.Join(lh.WorkspaceOf(c.ID), "out", "plot\xff.png"), png, 0o644); err != nil {
			return backend.ExecuteResult{}, err
		}
		files, err := h.Sandbox().ReadFiles(ctx, c.ID, "out", 1<<20, 1<<20)
		if err != nil {
			return backend.ExecuteResult{}, err
		}
		res := backend.ExecuteResult{Success: true}
		for _, f := range files {
			res.Images = append(res.Images, backend.Image{Name: f.Name, MIMEType: "image/png", Data: f.Data})
		}
		return res, nil
	}})
	r, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Images) != 1 || r.Images[0].Name != "plot\uFFFD.png" || !bytes.Equal(r.Images[0].Data, png) {
		t.Fatalf("images %+v", r.Images)
	}
}

// Typed values are checked where they cross the plugin connection: a
// signal no host accepts is refused by the SDK before it is sent, the same
// spelled otherwise ("SIGINT", "int") is the same signal, and a stream name
// other than stdout and stderr is refused on the core's side.
func TestTypedValuesAtTheBoundary(t *testing.T) {
	lh := sdktest.NewLocalHost(t.TempDir())
	t.Run("signals", func(t *testing.T) {
		for _, c := range []struct {
			sig  host.Signal
			want host.Kind // "": accepted
		}{
			{host.SIGTERM, ""}, {"SIGINT", ""}, {"int", ""}, {"STOP", host.KindInvalid}, {"", host.KindInvalid}, {"9", host.KindInvalid},
		} {
			var got host.Kind
			b := serveFakeOn(t, lh, plugin.DefaultMaxMessage, &fake{execute: func(h host.Host, _ backend.ExecuteRequest) (backend.ExecuteResult, error) {
				// An unknown container: a signal that passes the check
				// reaches the host, which answers not-found.
				err := h.Sandbox().Signal(context.Background(), "nosuch", c.sig, host.SignalInit)
				var he *host.Error
				if errors.As(err, &he) {
					got = he.Kind
				}
				if he != nil && he.Kind == host.KindInvalid && !strings.Contains(he.Message, "INT, TERM, KILL") {
					t.Errorf("refusal of %q does not list the signals: %s", c.sig, he.Message)
				}
				return backend.ExecuteResult{Success: true}, nil
			}})
			if _, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "x"}); err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(c.want, host.KindNotFound); got != want {
				t.Errorf("Signal %q: got %q, want %q", c.sig, got, want)
			}
		}
	})
	t.Run("stream names", func(t *testing.T) {
		b := serveFakeOn(t, lh, plugin.DefaultMaxMessage, &fake{execute: result(backend.ExecuteResult{Success: true}), events: []backend.StreamEvent{{Name: "stdlog", Text: "x"}}})
		_, err := b.ExecuteInSession(context.Background(), backend.ExecuteRequest{Code: "x", SessionID: "s"}, func(backend.StreamEvent) {})
		if err == nil || !strings.Contains(err.Error(), `"stdlog" is not stdout or stderr`) {
			t.Fatalf("an unknown stream name: %v", err)
		}
	})
}
