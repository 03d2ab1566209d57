package main

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
)

//go:embed runner.py
var runner []byte

// Info identifies this plugin; its version moves independently of the core.
var Info = plugin.Info{Name: "python", Version: "0.1.0", Description: "stateless Python: a fresh container per run"}

// Config is [plugins.python.config] merged over what the core provides.
type Config struct {
	Image          string `json:"image"`
	MaxOutputBytes int64  `json:"max_output_bytes"`
	MaxImageBytes  int64  `json:"max_image_bytes"`
}

// Backend runs Python in one-shot containers through the host's Sandbox.
type Backend struct {
	sb    host.Sandbox
	audit host.Audit
	cfg   Config
}

// New is the plugin factory.
func New(h host.Host, raw backend.Config) (backend.Backend, error) {
	cfg := Config{Image: "mcp-forge/python:3.11", MaxOutputBytes: 1 << 20, MaxImageBytes: 5 << 20}
	if err := raw.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &Backend{sb: h.Sandbox(), audit: h.Audit(), cfg: cfg}, nil
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"python"}, RichOutput: true}, nil
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
		"FORGE_MAX_OUTPUT": strconv.FormatInt(maxOut, 10),
		"MPLBACKEND":       "Agg", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
	}
	for k, v := range req.Env {
		if strings.HasPrefix(k, "FORGE_") {
			continue
		}
		env[k] = v
	}
	ctr, err := b.sb.Create(ctx, host.Intent{
		Image:   image,
		Command: []string{"python3", "-u", inDir + "/runner.py"},
		Env:     env,
		WorkDir: outDir,
		Timeout: req.Timeout,
		Memory:  req.Memory,
		Mounts: []host.Mount{
			{Subdir: "in", Target: inDir, ReadOnly: true},
			{Subdir: "meta", Target: metaDir},
			{Subdir: "out", Target: outDir},
		},
		Files:    map[string][]byte{"in/runner.py": runner, "in/code.py": []byte(req.Code)},
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
		res.Stdout, res.Stderr = string(out.Stdout), string(out.Stderr)
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
		res.ResultJSON, res.ResultRepr, res.ResultIsRepr = env2.JSON, env2.Repr, env2.IsRepr
		// The runner counted what the program printed, including what it cut.
		res.StdoutBytes = max(res.StdoutBytes, env2.StdoutBytes)
		res.StderrBytes = max(res.StderrBytes, env2.StderrBytes)
	case w.ExitCode != 0:
		res.Error = &backend.ExecError{Name: "ProcessExit", Message: fmt.Sprintf("the Python process ended with exit code %d before reporting a result", w.ExitCode)}
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

func firstPositive(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}
