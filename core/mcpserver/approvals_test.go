package mcpserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/engine/enginetest"
	"github.com/mcp-forge/mcp-forge/core/environments"
	envtools "github.com/mcp-forge/mcp-forge/core/mcpserver/toolsets/environments"
	"github.com/mcp-forge/mcp-forge/core/runtime"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
)

// noImages has no image: a build gets past the approval to the builder.
type noImages struct{ runtime.ImageBuilder }

func (noImages) Image(context.Context, string) (runtime.ImageInfo, bool, error) {
	return runtime.ImageInfo{}, false, nil
}

// noBuilder: the builder is not loaded, so an approved build stops there
// (environment_builder) and an unapproved one before (package_approval).
type noBuilder struct{}

func (noBuilder) Builder(context.Context, string) (builder.Builder, error) {
	return nil, errors.New("not loaded in this test")
}

// Issue 20 item 5, through a real go-sdk client: an approval answer is
// taken only when it answers the question the server asked in that call,
// of that connection, once. A client that declared no elicitation and
// sends an accept on its first call builds nothing; so does a made-up,
// replayed or another connection's request state, or one asked for other
// packages. Every ignored answer is audited as approval_unsolicited.
func TestBuildApprovalAnswersOnlyQuestions(t *testing.T) {
	r := newRig(t)
	cfg := config.Default().EnvironmentBuilder
	cfg.PackageValidation.UseAllowlist = false
	rec, read := enginetest.Audit(t)
	svc, err := environments.New(environments.Options{Config: cfg, StateDir: t.TempDir(), Images: noImages{}, Builders: noBuilder{},
		DefaultBase: map[string]string{"python": "mcp-forge/python:3.11"}, Audit: rec})
	if err != nil {
		t.Fatal(err)
	}
	r.srv.SetEnvironments(svc, "")
	args := map[string]any{"name": "nightly", "packages": []string{"thing-nightly"}}
	accept := mcp.InputResponseMap{envtools.ApprovalID: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	build := func(t *testing.T, cs *mcp.ClientSession, args map[string]any, state string, answers mcp.InputResponseMap) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "build_environment", Arguments: args, InputResponses: answers, RequestState: state})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	unsolicited := func() int {
		n := 0
		for _, e := range read() {
			if e.Details["rule"] == environments.RuleUnsolicited {
				n++
			}
		}
		return n
	}
	approved := func() int {
		n := 0
		for _, e := range read() {
			if e.Event == environments.EventApproved {
				n++
			}
		}
		return n
	}

	// A client that can ask nobody, answering a question never asked.
	mute := r.connect(t, nil)
	for _, state := range []string{"", "forged-state"} {
		res := build(t, mute, args, state, accept)
		if !res.IsError || !strings.Contains(text(res), "refused (package_approval)") || !strings.Contains(text(res), "was ignored") {
			t.Fatalf("state %q: an unsolicited accept was taken: %s", state, text(res))
		}
	}
	if n := unsolicited(); n != 2 || approved() != 0 {
		t.Fatalf("%d approval_unsolicited entries, %d approvals; want 2, 0", n, approved())
	}

	// Clients that can be asked, doing the round trip themselves.
	asker := func() *mcp.ClientSession {
		return r.connect(t, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				t.Error("the server asked by a request; it should return input requests")
				return nil, errors.New("unexpected")
			}})
	}
	a, b := asker(), asker()
	ask := func(cs *mcp.ClientSession, args map[string]any) string {
		t.Helper()
		res := build(t, cs, args, "", nil)
		if !res.NeedsInput() || res.InputRequests[envtools.ApprovalID] == nil || res.RequestState == "" {
			t.Fatalf("want the approval question: %s %+v", text(res), res)
		}
		return res.RequestState
	}
	tok := ask(a, args)
	// Another connection cannot answer a's question; an answer on a first
	// call is no answer: both are asked again instead.
	for _, state := range []string{tok, ""} {
		if res := build(t, b, args, state, accept); !res.NeedsInput() {
			t.Fatalf("b answered with state %q: %s", state, text(res))
		}
	}
	// Nor can a's answer to one build approve other packages.
	other := map[string]any{"name": "nightly", "packages": []string{"other-nightly"}}
	tok2 := ask(a, other)
	if res := build(t, a, args, tok2, accept); !res.NeedsInput() {
		t.Fatalf("an answer for other packages approved: %s", text(res))
	}
	if approved() != 0 {
		t.Fatal("approved without answering the question")
	}
	// The real answer counts, once.
	res := build(t, a, args, tok, accept)
	if !res.IsError || !strings.Contains(text(res), "refused (environment_builder)") || approved() != 1 {
		t.Fatalf("the answer to the question asked was not taken: %s", text(res))
	}
	if res := build(t, a, args, tok, accept); !res.NeedsInput() || approved() != 1 {
		t.Fatalf("a replayed answer was taken: %s", text(res))
	}
	if n := unsolicited(); n != 6 {
		t.Fatalf("%d approval_unsolicited entries, want 6 (2 + other connection, first call, other packages, replay)", n)
	}
}
