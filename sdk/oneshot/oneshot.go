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
//
// # The resident runner
//
// A runner that also keeps this contract (Spec.Resident) is started before
// its code exists, so that a container can wait ready in a warm pool, and
// so that a run's timeout counts the code's run and not the container's
// start. The container's command is the runner under
// `sh -c 'exec "$@" >>$FORGE_META/stdout 2>>$FORGE_META/stderr'`, with
// FORGE_CHAN (a writable directory) set and FORGE_MAX_OUTPUT unset, and the
// intent declares the endpoint "runner" at $FORGE_CHAN/runner.sock. The
// runner:
//
//  1. does its imports (and those named in FORGE_PRELOAD, a comma list),
//  2. listens on the unix socket $FORGE_CHAN/runner.sock (mode 0666: the
//     host connects as another user); the backend dials the endpoint
//     through the host (host.Sandbox.Dial, KindUnavailable until then) and
//     takes an accepted connection as "ready",
//  3. accepts ONE connection, then closes and removes the socket (later
//     connections find nothing),
//  4. reads one line from it: {"code": "...", "max_output": N,
//     "max_image": M} (max_image may be absent: 0),
//  5. empties its stdout and stderr files (start-up noise is not the
//     program's), runs the code as above with N as the output cap,
//  6. cuts the stdout and stderr files to N bytes (counting what they held
//     in stdout_bytes and stderr_bytes), writes the envelope as ONE line
//     on the connection, and exits.
//
// The envelope may carry "inline": {"output": {"stdout": B64, "stderr":
// B64}, "files": [{"name": NAME, "size": BYTES, "data": B64}]}, what the
// backend would otherwise read from the files (on Kubernetes each read is
// a round trip through the API server): the stdout and stderr files whole,
// and the image files in $FORGE_OUT (regular, non-empty), each listed with
// its data when it is at most M bytes, without it when larger. Each part
// is optional (absent: the backend reads those files); a runner leaves a
// part out rather than exceed 1 MiB of data in all. The backend holds both
// parts to the caps it applies to the files.
//
// The runner writes nothing before the request: the backend takes a
// connection that ends or speaks while idle as a dead container.
//
// The backend starts the timeout when it has written the request, returns
// as soon as the envelope arrives (the output files are complete by then),
// and removes the container once it has exited; the container never serves
// a second run. A container still running a second after the envelope runs
// processes of the code, not the runner (code that wrote an envelope
// itself, a child it forked): it is killed. A warm container's run is
// recorded as the event "warm_run" with details container_id and run_id,
// which the core takes as that container serving the run (its slots are
// held until the container is removed). A runner that dies instead (a timeout, an OOM kill,
// os._exit) is reported from the container's end, as a cold run is.
//
// Through ExecuteStream (backend.StreamingBackend) a resident run still
// going half a second after its request has its stdout and stderr files
// followed with tail(1) exec'd in its container, and what they gain sent as
// events while it runs: the runner needs nothing more (see stream.go).
package oneshot

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// Resident says the runner also keeps the resident contract (see the
	// package documentation): every run then goes through it, so the
	// timeout counts the code's run and not the container's start, and
	// warm containers can be kept ready.
	Resident bool
	// Warm is how many ready containers to keep for DefaultImage under the
	// default limits when the configuration says nothing (Resident only).
	Warm int
}

// Config is [plugins.NAME.config] merged over what the core provides.
type Config struct {
	backend.ImageConfig
	// From the core (forge:"core": not an operator's key): the output
	// limits, the execution limits a container gets by default and the
	// longest timeout it may have (seconds).
	MaxOutputBytes int64  `json:"max_output_bytes" forge:"core"`
	MaxImageBytes  int64  `json:"max_image_bytes" forge:"core"`
	DefaultMemory  string `json:"default_memory" forge:"core"`
	DefaultTimeout int64  `json:"default_timeout" forge:"core"`
	MaxTimeout     int64  `json:"max_timeout" forge:"core"`

	// Warm is the number of ready containers kept for the configured image
	// under the default limits and no extra environment; 0 turns the pool
	// off. Unset: Spec.Warm when the image is the plugin's default, else 0.
	Warm *int `json:"warm"`
	// WarmMax is what a busy pool grows to: each run that finds no ready
	// container raises its target by one, up to WarmMax and the memory
	// cap, and a minute without runs gives one back, down to Warm.
	// Unset: four times Warm (a burst of 8 finds 8 ready after one earlier burst).
	WarmMax *int `json:"warm_max"`
	// WarmMemory caps the summed memory limits of the warm containers
	// ("2g"); "" or "0": no cap beyond Warm.
	WarmMemory string `json:"warm_memory"`
	// WarmPreload names modules a warm runner imports before it is ready
	// (Python: "numpy,pandas"); their import time leaves the runs.
	WarmPreload []string `json:"warm_preload"`
}

// Backend runs programs in one-shot containers through the host's Sandbox.
type Backend struct {
	spec  Spec
	sb    host.Sandbox
	audit host.Audit
	cfg   Config
	pool  *pool[*resident]
	// poolMem is the memory a pooled container may use (a key's item).
	poolMem int64
	bg      sync.WaitGroup // removals of used containers under way
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
		b := &Backend{spec: spec, sb: h.Sandbox(), audit: h.Audit(), cfg: cfg}
		if err := b.startPool(); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return b, nil
	}
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) {
	c := backend.Capabilities{Languages: []string{b.spec.Language}, RichOutput: true, MCPTools: true, InputFiles: true, SandboxGrants: true}
	b.spec.Runtime.Describe(&c, b.spec.DefaultImage, b.cfg.ImageConfig)
	return c, nil
}

// Stats implements backend.StatsReporter: the warm pool now, if any.
func (b *Backend) Stats(context.Context) (backend.Stats, error) {
	var st backend.Stats
	if p, ok := b.Pool(); ok {
		st.WarmPool = &p
	}
	return st, nil
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
	// Inline: a resident runner's answer only (a cold run's result.json
	// is a file the code can write); see inlined.
	Inline *inlined `json:"inline"`
}

var imageTypes = map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml", ".gif": "image/gif"}

// Execute implements backend.Backend.
func (b *Backend) Execute(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	if b.spec.Resident {
		return b.executeResident(ctx, req, nil)
	}
	return b.executeCold(ctx, req)
}

// addInputFiles adds a run's input files to a container's files, each
// mounted read-only onto its path in the working directory: the run reads
// it and cannot change it.
func addInputFiles(mounts []host.Mount, files map[string][]byte, inputs map[string][]byte) ([]host.Mount, error) {
	for p, data := range inputs {
		// The core checked the paths; a plugin must not trust that alone.
		if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
			return nil, host.Errorf(host.KindInvalid, "input file path %q: must be a clean relative path inside the working directory", p)
		}
		files[inputsSubdir+"/"+p] = data
		mounts = append(mounts, host.Mount{Subdir: inputsSubdir + "/" + p, Target: outDir + "/" + p, ReadOnly: true})
	}
	return mounts, nil
}

// executeCold runs a runner without the resident contract: the code goes
// in with the container, and the run is over when the container exits.
func (b *Backend) executeCold(ctx context.Context, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
	start := time.Now()
	p := b.params(req)
	in := b.intent(p.image, req, map[string]string{"FORGE_MAX_OUTPUT": strconv.FormatInt(p.maxOut, 10)})
	in.Files["in/"+b.spec.CodeAs] = []byte(req.Code)
	var err error
	if in.Mounts, err = addInputFiles(in.Mounts, in.Files, req.InputFiles); err != nil {
		return backend.ExecuteResult{}, err
	}
	in.CodeHash, in.ToolsGrant, in.NetworkGrant, in.SandboxGrant = p.codeHash, req.ToolsGrant, req.NetworkGrant, req.SandboxGrant
	in.Labels = map[string]string{host.LabelRun: req.RunID}
	ctr, err := b.sb.Create(ctx, in)
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
	o := outcome{w: w}
	if out, err := b.sb.Logs(ctx, ctr.ID, p.maxOut); err == nil {
		o.stdout, o.stderr = out.Stdout, out.Stderr
		o.stdoutTotal, o.stderrTotal = out.StdoutTotal, out.StderrTotal
	}
	meta, _ := b.sb.ReadFiles(ctx, ctr.ID, "meta", 4*p.maxOut+(1<<20), 4*p.maxOut+(1<<20))
	for _, f := range meta {
		var env2 envelope
		if f.Name == "result.json" && !f.Skipped && json.Unmarshal(f.Data, &env2) == nil {
			env2.Inline = nil // the code could have written it
			o.env = &env2
		}
	}
	return b.finish(ctx, req, ctr.ID, o, p.maxImg, start), nil
}

// runParams is what a run takes from its request and the configuration.
type runParams struct {
	image          string
	maxOut, maxImg int64
	codeHash       string // sha256 of the code, for the audit log
}

func (b *Backend) params(req backend.ExecuteRequest) runParams {
	sum := sha256.Sum256([]byte(req.Code))
	return runParams{image: cmp.Or(req.Image, b.cfg.Image), maxOut: firstPositive(req.MaxOutputBytes, b.cfg.MaxOutputBytes),
		maxImg: firstPositive(req.MaxImageBytes, b.cfg.MaxImageBytes), codeHash: hex.EncodeToString(sum[:])}
}

// intent is what every container of this backend has, cold or resident:
// the runner in in/, the in, meta and out mounts, the working directory,
// and the environment: the runner's variables (FORGE_IN, FORGE_META,
// FORGE_OUT, HOME and those of runnerEnv), then the spec's, then the
// request's without FORGE_ names.
func (b *Backend) intent(image string, req backend.ExecuteRequest, runnerEnv map[string]string) host.Intent {
	env := map[string]string{"FORGE_IN": inDir, "FORGE_META": metaDir, "FORGE_OUT": outDir, "HOME": "/tmp"}
	maps.Copy(env, runnerEnv)
	maps.Copy(env, b.spec.Env)
	for k, v := range req.Env {
		if !strings.HasPrefix(k, "FORGE_") {
			env[k] = v
		}
	}
	return host.Intent{
		Image: image, Command: b.spec.Command(inDir + "/" + b.spec.RunnerAs), Env: env, WorkDir: outDir,
		Timeout: req.Timeout, Memory: req.Memory,
		Mounts: []host.Mount{
			{Subdir: "in", Target: inDir, ReadOnly: true},
			{Subdir: "meta", Target: metaDir},
			{Subdir: "out", Target: outDir},
		},
		Files: map[string][]byte{"in/" + b.spec.RunnerAs: b.spec.Runner},
	}
}

// outcome is what a run left: how it ended, the runner's envelope if it
// wrote one, and the program's output.
type outcome struct {
	w                        host.WaitResult
	env                      *envelope
	stdout, stderr           []byte
	stdoutTotal, stderrTotal int64
	notices                  []string
	outputRead               bool               // stdout and stderr came in the runner's answer
	files                    []host.File        // the output directory, when filesRead
	filesRead                bool               // it came in the runner's answer
	failure                  *backend.ExecError // why the run has no answer, when the backend knows better than the exit
}

// finish turns an outcome into the result, the same for every path: cold,
// resident started for the run, or warm from the pool.
func (b *Backend) finish(ctx context.Context, req backend.ExecuteRequest, id string, o outcome, maxImg int64, start time.Time) backend.ExecuteResult {
	w := o.w
	res := backend.ExecuteResult{ExitCode: w.ExitCode, StdoutBytes: o.stdoutTotal, StderrBytes: o.stderrTotal, Notices: o.notices}
	switch {
	case o.failure != nil:
		res.Error = o.failure
	case w.TimedOut:
		res.Error = &backend.ExecError{Name: "Timeout", Message: w.Message}
	case w.OOMKilled:
		res.Error = &backend.ExecError{Name: "OutOfMemory", Message: w.Message}
	case o.env != nil:
		env2 := o.env
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
	res.Stdout = validText(o.stdout, res.StdoutBytes > int64(len(o.stdout)), "stdout", &replaced)
	res.Stderr = validText(o.stderr, res.StderrBytes > int64(len(o.stderr)), "stderr", &replaced)
	if len(replaced) > 0 {
		slices.Sort(replaced) // the same order as the plugin boundary's notice
		res.Notices = append(res.Notices, sanitize.InvalidUTF8Notice(replaced))
	}
	res.Success = res.Error == nil && res.ExitCode == 0
	if res.Error == nil && res.ExitCode != 0 {
		res.Error = &backend.ExecError{Name: "SystemExit", Message: fmt.Sprintf("exit code %d", res.ExitCode)}
	}
	files := o.files
	if !o.filesRead {
		files, _ = b.sb.ReadFiles(ctx, id, "out", maxImg, 4*maxImg)
	}
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
	return res
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
