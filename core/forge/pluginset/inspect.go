package pluginset

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/mcp-forge/mcp-forge/core/audit"
	"github.com/mcp-forge/mcp-forge/core/config"
	"github.com/mcp-forge/mcp-forge/core/plugins"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// Inspect starts the plugins only to learn what they are and run (images,
// languages), then stops them. Their host services refuse every request,
// so no container is made and nothing is audited: it is for commands such
// as `mcp-forge images` and doctor, not for serving.
func Inspect(ctx context.Context, cfg config.Config) []plugins.Status {
	m := plugins.NewManager(plugins.Discover(cfg, Dir(cfg)), func(string) host.Host { return noHost{} },
		Settings(cfg), audit.Discard{}, hclog.NewNullLogger())
	defer m.Close()
	m.LoadAll(ctx)
	return m.Statuses()
}

// Images maps each image the backends run to the backends that run it.
func Images(sts []plugins.Status) map[string][]string {
	out := map[string][]string{}
	for _, st := range sts {
		if img := st.Capabilities.Image; img != "" && st.Error == "" {
			out[img] = append(out[img], st.Name)
		}
	}
	return out
}

// noHost is the host of a plugin that is only inspected.
type noHost struct{}

func (noHost) Sandbox() host.Sandbox { return noSandbox{} }
func (noHost) Audit() host.Audit     { return noSandbox{} }

type noSandbox struct{}

func refused() error {
	return host.Errorf(host.KindUnavailable, "this command only inspects plugins: it runs no containers")
}

func (noSandbox) Record(context.Context, host.Event) error { return refused() }
func (noSandbox) Create(context.Context, host.Intent) (host.Container, error) {
	return host.Container{}, refused()
}
func (noSandbox) Start(context.Context, string) error { return refused() }
func (noSandbox) Wait(context.Context, string, time.Duration) (host.WaitResult, error) {
	return host.WaitResult{}, refused()
}
func (noSandbox) State(context.Context, string) (host.State, error) { return host.State{}, refused() }
func (noSandbox) Logs(context.Context, string, int64) (host.Output, error) {
	return host.Output{}, refused()
}
func (noSandbox) Exec(context.Context, string, host.ExecRequest) (host.ExecResult, error) {
	return host.ExecResult{}, refused()
}
func (noSandbox) Signal(context.Context, string, host.Signal, host.SignalScope) error {
	return refused()
}
func (noSandbox) Stop(context.Context, string, time.Duration) error { return refused() }
func (noSandbox) Remove(context.Context, string) error              { return refused() }
func (noSandbox) ReadFiles(context.Context, string, string, int64, int64) ([]host.File, error) {
	return nil, refused()
}
func (noSandbox) PutFile(context.Context, string, string, []byte) error { return refused() }
func (noSandbox) GetFile(context.Context, string, string, int64) ([]byte, error) {
	return nil, refused()
}
func (noSandbox) RemoveWorkspace(context.Context, string) error { return refused() }
func (noSandbox) Clamp(context.Context, string) error           { return refused() }
func (noSandbox) Claim(context.Context, string, string) error   { return refused() }
func (noSandbox) Dial(context.Context, string, string) (net.Conn, error) {
	return nil, refused()
}

var _ host.Sandbox = noSandbox{}
