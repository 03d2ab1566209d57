package execution

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Confirm asks a client that declared elicitation and reports its answer;
// a client that did not is reported unsupported, never asked.
func TestConfirm(t *testing.T) {
	for _, tc := range []struct {
		name                string
		handler             func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)
		version             string
		approved, supported bool
	}{
		{"no elicitation", nil, "2025-11-25", false, false},
		{"protocol without server requests", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("asked a client that cannot be asked")
			return &mcp.ElicitResult{Action: "accept"}, nil
		}, "", false, false},
		{"accept", func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if !strings.Contains(r.Params.Message, "mem.write") {
				t.Errorf("message %q", r.Params.Message)
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		}, "2025-11-25", true, true},
		{"decline", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}, "2025-11-25", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
			ct, st := mcp.NewInMemoryTransports()
			ss, err := srv.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: tc.handler}).Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			ok, supported, err := Confirm(ctx, ss, "call mem.write?")
			if err != nil || ok != tc.approved || supported != tc.supported {
				t.Fatalf("Confirm = %v, %v, %v; want %v, %v", ok, supported, err, tc.approved, tc.supported)
			}
		})
	}
}
