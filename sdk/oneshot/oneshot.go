// Package oneshot implements a stateless backend: a fresh sandbox container
// for every run, the code and a language runner passed in through a
// read-only mount, a JSON envelope and image files read back. The python and
// r plugins are specs of it.
//
// # The runner contract
//
// The container runs Spec.Command(<in>/<RunnerAs>) with the working
// directory <out> and these environment variables:
//
//	FORGE_IN          read-only directory with the runner and the code (<in>/<CodeAs>)
//	FORGE_META        where the runner writes result.json, the envelope
//	FORGE_OUT         the working directory; image files (.png .jpg .jpeg .svg .gif) left here come back
//	FORGE_MAX_OUTPUT  the byte cap of stdout and of stderr (the backend cuts; the runner may too)
//
// The program's stdout and stderr are the container's own. The envelope,
// every field optional:
//
//	{
//	  "json": "42",            // the value of the program's last expression as JSON text, "" for none
//	  "repr": "42",            // its display form
//	  "is_repr": false,        // true when the value has no JSON form (repr only)
//	  "stdout_bytes": 0,       // bytes the program wrote, if the runner cut them itself
//	  "stderr_bytes": 0,
//	  "exit_code": 0,          // the program's exit status; it wins over the runner process's own
//	  "error": {"name": "ZeroDivisionError", "message": "division by zero",
//	            "traceback": ["..."], "line": 3, "column": 0}   // line: 1-based, in the user's code
//	}
//
// A run whose envelope has an error, or a non-zero exit_code, fails; no
// envelope and a non-zero exit fails with ProcessExit; a timeout or an OOM
// kill is reported by the host whatever the envelope says. The python and
// r plugins' runners (runner.py, runner.R) are complete examples. A runner
// in any language that the image has will do; in POSIX sh, for a
// "shell" language whose result is the last line of output:
//
//	#!/bin/sh
//	out=$(sh "$FORGE_IN/code.sh" 2>"$FORGE_META/err"); status=$?
//	printf '%s\n' "$out"; cat "$FORGE_META/err" >&2
//	last=$(printf '%s\n' "$out" | tail -n 1 | sed 's/\\/\\\\/g; s/"/\\"/g')
//	printf '{"repr": "%s", "exit_code": %d}' "$last" "$status" >"$FORGE_META/result.json"
//
// with Spec{Language: "shell", DefaultImage: "mcp-forge/python:3.11",
// Command: func(r string) []string { return []string{"sh", r} },
// Runner: runnerSh, RunnerAs: "runner.sh", CodeAs: "code.sh"}.
// Spec.Finish lets Go code post-process every result (parse a language's
// own error format, add notices) without touching the runner.
package oneshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/sanitize"
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
	// Runtime describes the language in DefaultImage for tool descriptions.
	Runtime backend.Runtime
	// Command runs the runner at the given in-container path.
	Command  func(runner string) []string
	Runner   []byte
	RunnerAs string // file name of the runner, e.g. "runner.py"
	CodeAs   string // file name of the user's code, e.g. "code.py"
	Env      map[string]string
	// Finish, if set, post-processes every result before it is returned
	// (after timeouts, errors and images are filled in).
	Finish func(req backend.ExecuteRequest, res *backend.ExecuteResult)
}

// Config is [plugins.NAME.config] merged over what the core provides.
type Config struct {
	backend.ImageConfig
	MaxOutputBytes int64 `json:"max_output_bytes"`
	MaxImageBytes  int64 `json:"max_image_bytes"`
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
		cfg := Config{ImageConfig: backend.ImageConfig{Image: spec.DefaultImage}, MaxOutputBytes: 1 << 20, MaxImageBytes: 5 << 20}
		if err := raw.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if cfg.Image == "" {
			cfg.Image = spec.DefaultImage
		}
		return &Backend{spec: spec, sb: h.Sandbox(), cfg: cfg}, nil
	}
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) {
	c := backend.Capabilities{Languages: []string{b.spec.Language}, RichOutput: true, MCPTools: true, InputFiles: true}
	b.spec.Runtime.Describe(&c, b.spec.DefaultImage, b.cfg.ImageConfig)
	return c, nil
}

// Container paths of the per-run directories.
const (
	inDir   = "/forge/in"   // code and runner, read-only
	metaDir = "/forge/meta" // the runner's envelope
	outDir  = "/forge/out"  // the working directory; image files here come back
	// inputsSubdir holds a run's input files on the host, each mounted
	// read-only onto its path under outDir.
	inputsSubdir = "inputs"
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
	mounts := []host.Mount{
		{Subdir: "in", Target: inDir, ReadOnly: true},
		{Subdir: "meta", Target: metaDir},
		{Subdir: "out", Target: outDir},
	}
	intentFiles := map[string][]byte{"in/" + b.spec.RunnerAs: b.spec.Runner, "in/" + b.spec.CodeAs: []byte(req.Code)}
	for p, data := range req.InputFiles {
		// The core checked the paths; a plugin must not trust that alone.
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			return backend.ExecuteResult{}, host.Errorf(host.KindInvalid, "input file path %q: must be a clean relative path inside the working directory", p)
		}
		// Each is mounted read-only onto its path in the working
		// directory: the run reads it and cannot change it.
		intentFiles[inputsSubdir+"/"+p] = data
		mounts = append(mounts, host.Mount{Subdir: inputsSubdir + "/" + p, Target: outDir + "/" + p, ReadOnly: true})
	}
	ctr, err := b.sb.Create(ctx, host.Intent{
		Image:    image,
		Command:  b.spec.Command(inDir + "/" + b.spec.RunnerAs),
		Env:      env,
		WorkDir:  outDir,
		Timeout:  req.Timeout,
		Memory:   req.Memory,
		Mounts:   mounts,
		Files:    intentFiles,
		CodeHash: hex.EncodeToString(sum[:]),
		Labels:   map[string]string{"run": req.RunID},

		ToolsGrant: req.ToolsGrant,
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
	var stdout, stderr []byte
	if out, err := b.sb.Logs(ctx, ctr.ID, maxOut); err == nil {
		stdout, stderr = out.Stdout, out.Stderr
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
		// The envelope's exit_code is the program's (a runner may not be
		// able to exit with it); a runner that leaves it 0 keeps its own.
		if env2.ExitCode != 0 {
			res.ExitCode = env2.ExitCode
		}
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
	// Only now is it known whether the output was cut (the runner may cap it).
	var replaced []string
	res.Stdout = validText(stdout, res.StdoutBytes > int64(len(stdout)), "stdout", &replaced)
	res.Stderr = validText(stderr, res.StderrBytes > int64(len(stderr)), "stderr", &replaced)
	if len(replaced) > 0 {
		slices.Sort(replaced) // the same order as the plugin boundary's notice
		res.Notices = append(res.Notices, sanitize.InvalidUTF8Notice(replaced))
	}
	res.Success = res.Error == nil && res.ExitCode == 0
	if res.Error == nil && res.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "SystemExit", Message: fmt.Sprintf("exit code %d", res.ExitCode)}
	}
	files, _ := b.sb.ReadFiles(ctx, ctr.ID, "out", maxImg, 4*maxImg)
	for _, f := range files {
		mime, ok := imageTypes[strings.ToLower(path.Ext(f.Name))]
		if _, input := req.InputFiles[f.Name]; !ok || input {
			continue // an input image is not the run's output
		}
		if f.Skipped {
			res.Notices = append(res.Notices, fmt.Sprintf("image %s (%d bytes) was not returned: over the %d-byte image limit (execution.max_image_size)", f.Name, f.Size, maxImg))
			continue
		}
		res.Images = append(res.Images, backend.Image{Name: f.Name, MIMEType: mime, Data: f.Data})
	}
	res.Duration = time.Since(start)
	if b.spec.Finish != nil {
		b.spec.Finish(req, &res)
	}
	return res, nil
}

// validText turns captured output into a string protobuf can carry: a
// character cut by the output cap is dropped, other invalid UTF-8 (a program
// may write any bytes) becomes U+FFFD and the field is named in replaced.
func validText(b []byte, capped bool, field string, replaced *[]string) string {
	s := string(b)
	if capped {
		s = sanitize.TrimCut(s)
	}
	s, bad := sanitize.UTF8(s)
	if bad {
		*replaced = append(*replaced, field)
	}
	return s
}

func firstPositive(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

var _ backend.Backend = (*Backend)(nil)
