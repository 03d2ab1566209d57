package history

import (
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
)

// rig is an engine whose histories are read, e as the MCP layer sees it.
type rig struct {
	*enginerig.Rig
	e struct {
		*engine.Engine
		*Reader
	}
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig)) *rig {
	t.Helper()
	r := &rig{Rig: enginerig.New(t, mutate, plugins)}
	r.e.Engine, r.e.Reader = r.E, New(r.Cfg, r.E, r.Rec)
	return r
}

var refusedBy = enginerig.RefusedBy
