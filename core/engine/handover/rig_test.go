package handover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine"
	"github.com/mcp-forge/mcp-forge/core/engine/enginerig"
)

// rig is an engine whose sessions replicas share, e as the MCP layer sees
// it.
type rig struct {
	*enginerig.Rig
	e struct {
		*engine.Engine
		*Replicas
	}
}

func newRig(t *testing.T, mutate func(*config.Config), plugins func(*enginerig.Rig)) *rig {
	t.Helper()
	r := &rig{Rig: enginerig.New(t, mutate, plugins)}
	rs := New(r.E, r.WS, r.Rec, r.Log)
	r.E.SetReplicas(rs)
	r.e.Engine, r.e.Replicas = r.E, rs
	return r
}

var refusedBy = enginerig.RefusedBy

// docs/audit.md lists every rule of a handed-over session.
func TestHandoverRulesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{RuleSessionHeld, RuleSessionMoved, RuleSessionRecord} {
		if !strings.Contains(string(doc), "| `"+rule+"` |") {
			t.Errorf("docs/audit.md does not list rule %s", rule)
		}
	}
}
