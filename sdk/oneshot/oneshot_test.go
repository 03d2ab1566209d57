package oneshot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/oneshot"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// The runner of the package documentation, verbatim.
const runnerSh = `#!/bin/sh
out=$(sh "$FORGE_IN/code.sh" 2>"$FORGE_META/err"); status=$?
printf '%s\n' "$out"; cat "$FORGE_META/err" >&2
last=$(printf '%s\n' "$out" | tail -n 1 | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"repr": "%s", "exit_code": %d}' "$last" "$status" >"$FORGE_META/result.json"
`

// imageHost records the image of every container created.
type imageHost struct {
	*sdktest.LocalHost
	images []string
}

func (h *imageHost) Sandbox() host.Sandbox { return h }

func (h *imageHost) Create(ctx context.Context, in host.Intent) (host.Container, error) {
	h.images = append(h.images, in.Image)
	return h.LocalHost.Create(ctx, in)
}

func shell(t *testing.T, cfg []byte, finish func(backend.ExecuteRequest, *backend.ExecuteResult)) (backend.Backend, *imageHost) {
	t.Helper()
	h := &imageHost{LocalHost: sdktest.NewLocalHost(t.TempDir())}
	f := oneshot.New(oneshot.Spec{Language: "shell", DefaultImage: "example/shell:1",
		Command: func(r string) []string { return []string{"sh", r} },
		Runner:  []byte(runnerSh), RunnerAs: "runner.sh", CodeAs: "code.sh", Finish: finish})
	b, err := f(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

func run(t *testing.T, b backend.Backend, req backend.ExecuteRequest) backend.ExecuteResult {
	t.Helper()
	req.Timeout = time.Minute
	r, err := b.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The documented sh runner works; the envelope's exit_code is the
// program's even though the runner itself exits 0.
func TestShellRunnerAndExitCode(t *testing.T) {
	b, _ := shell(t, nil, nil)
	r := run(t, b, backend.ExecuteRequest{Code: "echo one\necho 'two \"q\"'"})
	if !r.Success || r.Stdout != "one\ntwo \"q\"\n" || r.ResultRepr != `two "q"` {
		t.Fatalf("%+v", r)
	}
	r = run(t, b, backend.ExecuteRequest{Code: "echo partial\nexit 3"})
	if r.Success || r.ExitCode != 3 || r.Error == nil || r.Error.Name != "SystemExit" {
		t.Fatalf("exit_code from the envelope: %+v %+v", r, r.Error)
	}
}

// The spec's default image is used unless the configuration or the request
// names another.
func TestDefaultImage(t *testing.T) {
	b, h := shell(t, nil, nil)
	run(t, b, backend.ExecuteRequest{Code: "true"})
	run(t, b, backend.ExecuteRequest{Code: "true", Image: "example/other:2"})
	b2, h2 := shell(t, []byte(`{"image": "example/configured:3"}`), nil)
	run(t, b2, backend.ExecuteRequest{Code: "true"})
	if got := strings.Join(append(h.images, h2.images...), " "); got != "example/shell:1 example/other:2 example/configured:3" {
		t.Fatalf("images %s", got)
	}
}

func TestFinishHook(t *testing.T) {
	b, _ := shell(t, nil, func(req backend.ExecuteRequest, res *backend.ExecuteResult) {
		res.Notices = append(res.Notices, "saw "+strings.TrimSpace(res.Stdout))
	})
	if r := run(t, b, backend.ExecuteRequest{Code: "echo hook"}); len(r.Notices) != 1 || r.Notices[0] != "saw hook" {
		t.Fatalf("%+v", r.Notices)
	}
}
