// Package sdktest runs a plugin (backend, builder or bridge) in-process over
// real gRPC against a host of your choosing, and holds the conformance
// suites every plugin of each type — ours or a third party's — is expected
// to pass.
package sdktest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/bridge"
	"github.com/mcp-forge/mcp-forge/sdk/builder"
	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/plugin"
	"github.com/mcp-forge/mcp-forge/sdk/pluginhost"
)

// Serve starts the backend built by factory in-process, configures it with h
// and cfg through the same gRPC shims, broker and limits as a real plugin,
// and returns the core-side client.
func Serve(t testing.TB, info plugin.Info, factory backend.Factory, h host.Host, cfg []byte) backend.Backend {
	t.Helper()
	return ServeLimited(t, info, factory, h, cfg, plugin.DefaultMaxMessage)
}

// ServeLimited is Serve with a gRPC message limit (see plugin.MessageLimit)
// on both sides, as the core sets it for real plugins.
func ServeLimited(t testing.TB, info plugin.Info, factory backend.Factory, h host.Host, cfg []byte, maxMessage int) backend.Backend {
	t.Helper()
	// A backend that keeps containers of its own (a warm pool) has them
	// removed when the test ends, before its temporary directories go.
	closing := func(h host.Host, cfg backend.Config) (backend.Backend, error) {
		b, err := factory(h, cfg)
		if c, ok := b.(interface{ Close() }); ok && err == nil {
			t.Cleanup(c.Close)
		}
		return b, err
	}
	return serveInProcess(t, info, plugin.TypeBackend, pluginhost.ServeConfig(info, closing, maxMessage), h, cfg, maxMessage).Backend()
}

// serveInProcess serves sc in this process, attaches the core's client to
// it, checks what it reports against info and typ, and configures it.
func serveInProcess(t testing.TB, info plugin.Info, typ plugin.Type, sc *goplugin.ServeConfig, h host.Host, cfg []byte, maxMessage int) *pluginhost.Client {
	t.Helper()
	// go-plugin's test mode: the plugin's serve configuration served in
	// this process, and the core's client configuration attached to it.
	ctx, cancel := context.WithCancel(context.Background())
	reattach := make(chan *goplugin.ReattachConfig, 1)
	closed := make(chan struct{})
	sc.Logger = hclog.NewNullLogger()
	sc.Test = &goplugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed}
	go goplugin.Serve(sc)
	var rc *goplugin.ReattachConfig
	select {
	case rc = <-reattach:
	case <-closed:
		cancel()
		t.Fatal("the plugin server stopped before it served")
	}
	c, err := pluginhost.Attach(rc, maxMessage, hclog.NewNullLogger())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Kill()
		cancel()
		<-closed
	})
	got, err := c.Describe(context.Background())
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if got.Name != info.Name || got.Version != info.Version || got.Type != typ {
		t.Fatalf("info round trip: got %+v, want %+v of type %s", got, info, typ)
	}
	if err := c.Configure(context.Background(), h, cfg); err != nil {
		t.Fatalf("configure: %v", err)
	}
	return c
}

// Launch runs a plugin binary the way the core does (sdk/pluginhost: a
// child process over go-plugin with AutoMTLS and no host environment, the
// API version negotiated, the reported version checked) and configures it
// with h and cfg. It is the suite's real mode: a test in a module that can
// build the real core passes that core's host services for h (sdktest
// itself imports nothing of the core), so the same conformance suite runs
// the real binary against real Podman and the real policy.
func Launch(t testing.TB, path string, h host.Host, cfg []byte) backend.Backend {
	t.Helper()
	return launch(t, path, plugin.TypeBackend, h, cfg).Backend()
}

// LaunchBuilder is Launch for a builder plugin binary.
func LaunchBuilder(t testing.TB, path string, h host.Host, cfg []byte) builder.Builder {
	t.Helper()
	return launch(t, path, plugin.TypeBuilder, h, cfg).Builder()
}

// LaunchBridge is Launch for a bridge plugin binary.
func LaunchBridge(t testing.TB, path string, h host.Host, cfg []byte) bridge.Bridge {
	t.Helper()
	return launch(t, path, plugin.TypeBridge, h, cfg).Bridge()
}

func launch(t testing.TB, path string, typ plugin.Type, h host.Host, cfg []byte) *pluginhost.Client {
	t.Helper()
	// The plugin starts in a directory of its own, as the core starts it:
	// a builder works there. It goes after the plugin (cleanups run last
	// first); a tool killed with the plugin may still be exiting, so the
	// removal retries for a while.
	dir, err := os.MkdirTemp("", "forge-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); os.RemoveAll(dir) != nil && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	})
	c, err := pluginhost.Launch(path, hclog.New(&hclog.LoggerOptions{Name: filepath.Base(path), Level: hclog.Warn, Output: os.Stderr}), pluginhost.Options{Dir: dir})
	if err != nil {
		t.Fatalf("launch %s: %v", path, err)
	}
	t.Cleanup(c.Kill)
	d, err := c.Describe(context.Background())
	if err != nil {
		t.Fatalf("describe %s: %v", path, err)
	}
	if err := pluginhost.ExpectType(d, typ); err != nil {
		t.Fatalf("launch %s: %v", path, err)
	}
	if err := c.Configure(context.Background(), h, cfg); err != nil {
		t.Fatalf("configure %s: %v", path, err)
	}
	return c
}

// ServeBuilder is Serve for a builder: in-process over real gRPC, through
// the same shims and limits as a real plugin.
func ServeBuilder(t testing.TB, info plugin.Info, factory builder.Factory, h host.Host, cfg []byte) builder.Builder {
	t.Helper()
	max := plugin.DefaultMaxMessage
	return serveInProcess(t, info, plugin.TypeBuilder, pluginhost.ServeBuilderConfig(info, factory, max), h, cfg, max).Builder()
}

// ServeBridge is Serve for a bridge.
func ServeBridge(t testing.TB, info plugin.Info, factory bridge.Factory, h host.Host, cfg []byte) bridge.Bridge {
	t.Helper()
	max := plugin.DefaultMaxMessage
	return serveInProcess(t, info, plugin.TypeBridge, pluginhost.ServeBridgeConfig(info, factory, max), h, cfg, max).Bridge()
}
