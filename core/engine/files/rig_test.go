package files

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
)

// rig is an engine with its sessions' files, e as the MCP layer sees them.
type rig struct {
	*enginerig.Rig
	e struct {
		*engine.Engine
		*Files
	}
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig)) *rig {
	t.Helper()
	r := &rig{Rig: enginerig.New(t, mutate, plugins)}
	f := New(r.Cfg, r.E, r.WS, r.Rec)
	r.E.SetFiles(f)
	r.e.Engine, r.e.Files = r.E, f
	return r
}

var refusedBy = enginerig.RefusedBy
