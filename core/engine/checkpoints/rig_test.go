package checkpoints

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/background"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
	"github.com/mcp-forge/mcp-forge/core/engine/files"
	"github.com/mcp-forge/mcp-forge/core/engine/handover"
)

// assembled is an engine with its checkpoints and the parts they meet
// (files, background jobs), as the MCP layer sees them.
type assembled struct {
	*engine.Engine
	*Keeper
	*files.Files
	*background.Runner
}

type rig struct {
	*enginerig.Rig
	e assembled
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig), opts ...Option) *rig {
	t.Helper()
	r := &rig{Rig: enginerig.New(t, mutate, plugins)}
	f := files.New(r.Cfg, r.E, r.WS, r.Rec)
	rs := handover.New(r.E, r.WS, r.Rec, r.Log)
	c := New(r.Cfg, r.E, f, rs, r.WS, r.Rec, r.Log, opts...)
	j, err := background.New(r.Cfg, r.E, r.Rec)
	if err != nil {
		t.Fatal(err)
	}
	r.E.SetFiles(f)
	r.E.SetCheckpoints(c)
	r.E.SetJobs(j)
	r.E.SetReplicas(rs)
	r.e = assembled{r.E, c, f, j}
	return r
}

var refusedBy = enginerig.RefusedBy
