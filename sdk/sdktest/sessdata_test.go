package sdktest_test

import (
	"context"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/sdktest"
)

// ckptFake reports checkpoint code and input files.
type ckptFake struct{ fake }

func (f *ckptFake) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"fake"}, Stateful: true, InputFiles: true,
		Checkpoint: &backend.Checkpoint{Save: "save()", Load: "load()", Missing: "no saver", Hint: "install it"}}, nil
}

// A backend's checkpoint code and input files cross the plugin boundary,
// so a third-party kernel supports checkpoints without a core change.
func TestCheckpointCodeAndInputFilesCrossTheBoundary(t *testing.T) {
	var got map[string][]byte
	f := &ckptFake{fake{execute: func(_ host.Host, req backend.ExecuteRequest) (backend.ExecuteResult, error) {
		got = req.InputFiles
		return backend.ExecuteResult{Success: true}, nil
	}}}
	factory := func(h host.Host, _ backend.Config) (backend.Backend, error) {
		f.h = h
		return f, nil
	}
	b := sdktest.ServeLimited(t, plugin.Info{Name: "fake", Version: "0.0.1"}, factory, sdktest.NewLocalHost(t.TempDir()), nil, 0)
	c, err := b.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cp := c.Checkpoint; cp == nil || cp.Save != "save()" || cp.Load != "load()" || cp.Missing != "no saver" || cp.Hint != "install it" || !c.InputFiles {
		t.Fatalf("capabilities after the boundary: %+v %+v", c, c.Checkpoint)
	}
	in := map[string][]byte{"data/x.csv": []byte("a,b\n"), "blob": {0, 0xff}}
	if _, err := b.Execute(context.Background(), backend.ExecuteRequest{Code: "1", Language: "fake", InputFiles: in}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["data/x.csv"]) != "a,b\n" || string(got["blob"]) != "\x00\xff" {
		t.Fatalf("input files after the boundary: %q", got)
	}
}
