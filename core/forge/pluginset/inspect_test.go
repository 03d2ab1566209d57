package pluginset

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// An inspected plugin's host refuses everything, saying why.
func TestInspectedHostRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := noHost{}.Sandbox()
	calls := map[string]func() error{
		"Record": func() error { return noHost{}.Audit().Record(ctx, host.Event{}) },
		"Create": func() error { _, err := s.Create(ctx, host.Intent{}); return err },
		"Start":  func() error { return s.Start(ctx, "c") },
		"Wait":   func() error { _, err := s.Wait(ctx, "c", 0); return err },
		"State":  func() error { _, err := s.State(ctx, "c"); return err },
		"Logs":   func() error { _, err := s.Logs(ctx, "c", 0); return err },
		"Exec":   func() error { _, err := s.Exec(ctx, "c", host.ExecRequest{}); return err },
		"Signal": func() error { return s.Signal(ctx, "c", "TERM", 0) },
		"Stop":   func() error { return s.Stop(ctx, "c", 0) },
		"Remove": func() error { return s.Remove(ctx, "c") },
		"ReadFiles": func() error {
			_, err := s.ReadFiles(ctx, "c", "/", 0, 0)
			return err
		},
		"PutFile":         func() error { return s.PutFile(ctx, "c", "/x", nil) },
		"GetFile":         func() error { _, err := s.GetFile(ctx, "c", "/x", 0); return err },
		"RemoveWorkspace": func() error { return s.RemoveWorkspace(ctx, "s") },
	}
	for name, call := range calls {
		err := call()
		var he *host.Error
		if !errors.As(err, &he) || he.Kind != host.KindUnavailable || !strings.Contains(err.Error(), "only inspects plugins") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
