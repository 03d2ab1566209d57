// Package enginerig builds an engine on enginetest's stand-ins for the
// unit tests of the engine's parts (background, files, checkpoints,
// handover), which add themselves to it: three plugins named unlike their
// languages, an audit log the test reads back, workspaces in a temporary
// directory.
package enginerig

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/policy"
	"github.com/mcp-forge/mcp-forge/core/workspace"
)

// Rig is an engine and the stand-ins it runs on. The plugins are named
// unlike their languages, so that nothing can work by a plugin being named
// like the language it serves.
type Rig struct {
	E      *engine.Engine
	Cfg    config.Config
	PM     *enginetest.Plugins
	Rec    *audit.Logger
	Audit  func() []audit.Entry // what was audited so far
	Snake  *enginetest.Backend  // stateless python
	Kernel *enginetest.Backend  // python sessions
	RS     *enginetest.Backend  // stateless r
	WS     *workspace.Manager
	Log    hclog.Logger
}

// New is Try that fails the test on an error.
func New(t *testing.T, mutate func(*config.Config), plugins func(r *Rig)) *Rig {
	t.Helper()
	r, err := Try(t, mutate, plugins)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Try builds the engine on the default configuration changed by mutate,
// with the plugins changed by plugins before it starts.
func Try(t *testing.T, mutate func(*config.Config), plugins func(r *Rig)) (*Rig, error) {
	t.Helper()
	cfg := config.Default()
	cfg.Volumes.BasePath = t.TempDir()
	if mutate != nil {
		mutate(&cfg)
	}
	r := &Rig{Cfg: cfg, PM: enginetest.NewPlugins(), Snake: enginetest.Stateless("python"), Kernel: enginetest.Stateful("python"), RS: enginetest.Stateless("r"), Log: hclog.NewNullLogger()}
	r.PM.Add("snake", r.Snake).Add("kernel", r.Kernel).Add("rscript", r.RS)
	if plugins != nil {
		plugins(r)
	}
	r.Rec, r.Audit = enginetest.Audit(t)
	r.WS = workspace.New(cfg.Volumes.BasePath, "t", 0, nil)
	var err error
	r.E, err = engine.New(cfg, policy.New(policy.FromConfig(cfg), nil), r.PM, r.WS, r.Rec, r.Log)
	return r, err
}

// Exec runs req as client c1 (unless it names another), with code "1"
// unless it has some.
func (r *Rig) Exec(t *testing.T, req engine.Request) (engine.Result, error) {
	t.Helper()
	if req.Code == "" {
		req.Code = "1"
	}
	if req.Client == "" {
		req.Client = "c1"
	}
	return r.E.Execute(context.Background(), req, nil)
}

// RefusedBy returns the rule of a refusal, or fails.
func RefusedBy(t *testing.T, err error) string {
	t.Helper()
	var re *engine.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("want a refusal, got %v", err)
	}
	return re.Rule
}
