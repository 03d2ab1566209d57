// Package oneshot implements a stateless backend: a fresh sandbox container
// for every run, the code and a language runner passed in through a
// read-only mount, a JSON envelope and image files read back. The python and
// r plugins are specs of it.
package oneshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Spec describes a language whose programs run in one-shot containers
// through a runner script. The runner reads <in>/<CodeFile>, runs it with
// stdout and stderr as its own, writes image files to the working directory
// <out>, and writes a JSON envelope to <meta>/result.json:
//
//	{"json": "...", "repr": "...", "is_repr": false, "stdout_bytes": 0, "stderr_bytes": 0, "exit_code": 0,
//	 "error": {"name": "...", "message": "...", "traceback": ["..."], "line": 0, "column": 0}}
type Spec struct {
	Language     string
	DefaultImage string
	// Command runs the runner at the given in-container path.
	Command  func(runner string) []string
	Runner   []byte
	RunnerAs string // file name of the runner, e.g. "runner.py"
	CodeAs   string // file name of the user's code, e.g. "code.py"
	Env      map[string]string
}

// Config is [plugins.NAME.config] merged over what the core provides.
type Config struct {
	Image          string `json:"image"`
	MaxOutputBytes int64  `json:"max_output_bytes"`
	MaxImageBytes  int64  `json:"max_image_bytes"`
}

// Backend runs programs in one-shot containers through the host's Sandbox.
type Backend struct {
	spec Spec
	sb   host.Sandbox
	cfg  Config
}

// New returns the plugin factory for spec.
func New(spec Spec) backend.Factory {
	return func(h host.Host, raw backend.Config) (backend.Backend, error) {
		cfg := Config{Image: spec.DefaultImage, MaxOutputBytes: 1 << 20, MaxImageBytes: 5 << 20}
		if err := raw.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return &Backend{spec: spec, sb: h.Sandbox(), cfg: cfg}, nil
	}
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{b.spec.Language}, RichOutput: true}, nil
}

// Container paths of the per-run directories.
const (
	inDir   = "/forge/in"   // code and runner, read-only
	metaDir = "/forge/meta" // the runner's envelope
	outDir  = "/forge/out"  // the working directory; image files here come back
)

type envelope struct {
	JSON        string             `json:"json"`
	Repr        string             `json:"repr"`
	IsRepr      bool               `json:"is_repr"`
	Error       *backend.ExecError `json:"error"`
	StdoutBytes int64              `json:"stdout_bytes"`
	StderrBytes int64              `json:"stderr_bytes"`
	ExitCode    int                `json:"exit_code"`
}

var imageTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml", ".gif": "image/gif"}

// Execute implements backend.Backend.
func (b *Backend) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	start := time.Now()
	maxOut := firstPositive(req.MaxOutputBytes, b.cfg.MaxOutputBytes)
	maxImg := firstPositive(req.MaxImageBytes, b.cfg.MaxImageBytes)
	image := req.Image
	if image == "" {
		image = b.cfg.Image
	}
	sum := sha256.Sum256([]byte(req.Code))
	env := map[string]string{
		"FORGE_IN": inDir, "FORGE_META": metaDir, "FORGE_OUT": outDir,
		"FORGE_MAX_OUTPUT": strconv.FormatInt(maxOut, 10), "HOME": "/tmp",
	}
	for k, v := range b.spec.Env {
		env[k] = v
	}
	for k, v := range req.Env {
		if strings.HasPrefix(k, "FORGE_") {
			continue
		}
		env[k] = v
	}
	ctr, err := b.sb.Create(ctx, host.Intent{
		Image:   image,
		Command: b.spec.Command(inDir + "/" + b.spec.RunnerAs),
		Env:     env,
		WorkDir: outDir,
		Timeout: req.Timeout,
		Memory:  req.Memory,
		Mounts: []host.Mount{
			{Subdir: "in", Target: inDir, ReadOnly: true},
			{Subdir: "meta", Target: metaDir},
			{Subdir: "out", Target: outDir},
		},
		Files:    map[string][]byte{"in/" + b.spec.RunnerAs: b.spec.Runner, "in/" + b.spec.CodeAs: []byte(req.Code)},
		CodeHash: hex.EncodeToString(sum[:]),
		Labels:   map[string]string{"run": req.RunID},
	})
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	defer b.sb.Remove(context.WithoutCancel(ctx), ctr.ID)
	if err := b.sb.Start(ctx, ctr.ID); err != nil {
		return backend.ExecuteResult{}, err
	}
	w, err := b.sb.Wait(ctx, ctr.ID, req.Timeout)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	res := backend.ExecuteResult{ExitCode: w.ExitCode}
	if out, err := b.sb.Logs(ctx, ctr.ID, maxOut); err == nil {
		res.Stdout = validText(out.Stdout, out.StdoutTotal > int64(len(out.Stdout)))
		res.Stderr = validText(out.Stderr, out.StderrTotal > int64(len(out.Stderr)))
		res.StdoutBytes, res.StderrBytes = out.StdoutTotal, out.StderrTotal
	}
	var env2 envelope
	meta, _ := b.sb.ReadFiles(ctx, ctr.ID, "meta", 4*maxOut+(1<<20), 4*maxOut+(1<<20))
	gotEnvelope := false
	for _, f := range meta {
		if f.Name == "result.json" && !f.Skipped && json.Unmarshal(f.Data, &env2) == nil {
			gotEnvelope = true
		}
	}
	switch {
	case w.TimedOut:
		res.Error = &backend.ExecError{Name: "Timeout", Message: w.Message}
	case w.OOMKilled:
		res.Error = &backend.ExecError{Name: "OutOfMemory", Message: w.Message}
	case gotEnvelope:
		res.Error = env2.Error
		if e := res.Error; e != nil {
			// Positions must fit the protocol's int32; 0 means unknown.
			if e.Line < 0 || e.Line > math.MaxInt32 {
				e.Line = 0
			}
			if e.Column < 0 || e.Column > math.MaxInt32 {
				e.Column = 0
			}
		}
		res.ResultJSON, res.ResultRepr, res.ResultIsRepr = env2.JSON, env2.Repr, env2.IsRepr
		// The runner counted what the program printed, including what it cut.
		res.StdoutBytes = max(res.StdoutBytes, env2.StdoutBytes)
		res.StderrBytes = max(res.StderrBytes, env2.StderrBytes)
	case w.Message != "":
		res.Error = &backend.ExecError{Name: "Killed", Message: w.Message}
	case w.ExitCode != 0:
		res.Error = &backend.ExecError{Name: "ProcessExit", Message: fmt.Sprintf("the %s process ended with exit code %d before reporting a result", b.spec.Language, w.ExitCode)}
	}
	res.Success = res.Error == nil && w.ExitCode == 0
	if res.Error == nil && w.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "SystemExit", Message: fmt.Sprintf("exit code %d", w.ExitCode)}
	}
	files, _ := b.sb.ReadFiles(ctx, ctr.ID, "out", maxImg, 4*maxImg)
	for _, f := range files {
		mime, ok := imageTypes[strings.ToLower(path.Ext(f.Name))]
		if !ok {
			continue
		}
		if f.Skipped {
			res.Notices = append(res.Notices, fmt.Sprintf("image %s (%d bytes) was not returned: over the %d-byte image limit (execution.max_image_size)", f.Name, f.Size, maxImg))
			continue
		}
		res.Images = append(res.Images, backend.Image{Name: f.Name, MIMEType: mime, Data: f.Data})
	}
	res.Duration = time.Since(start)
	return res, nil
}

// validText turns captured output into a string protobuf can carry: a
// character cut by the output cap is dropped, other invalid UTF-8 (a program
// may write any bytes) becomes U+FFFD.
func validText(b []byte, capped bool) string {
	if capped {
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func firstPositive(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}
