package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// Option adjusts how a plugin serves: ServeBackend(info, factory, opts...).
type Option func(*serveOptions)

type serveOptions struct {
	logger hclog.Logger
	debug  bool
	out    io.Writer // where debug mode prints its reattach line
}

// WithLogger replaces the plugin's logger (Logger(info.Name): JSON on
// stderr, which the core re-emits). Keep it on stderr: stdout belongs to
// go-plugin's handshake.
func WithLogger(l hclog.Logger) Option { return func(o *serveOptions) { o.logger = l } }

// WithDebug serves in debug mode whatever the command line says: see
// DebugFlag.
func WithDebug() Option { return func(o *serveOptions) { o.debug = true } }

// DebugFlag on a plugin's command line (mcp-forge-plugin-NAME -debug) serves
// in debug mode, with no change to its main: the plugin is started by you
// (under a debugger: dlv exec ./mcp-forge-plugin-NAME -- -debug) rather than
// by the core, prints the line
//
//	FORGE_REATTACH_PLUGINS='{"NAME":{...}}'
//
// and waits; `mcp-forge serve` started with that variable in its
// environment connects to this process instead of starting the plugin
// (checksum pins do not apply to it, which the core logs). Stop it with
// Ctrl-C. For development only: the connection is a local socket without
// the mutual TLS of a launched plugin.
const DebugFlag = "-debug"

// ReattachEnv is the environment variable the core reads reattach
// configurations from: a JSON object, plugin name → Reattach.
const ReattachEnv = "FORGE_REATTACH_PLUGINS"

// Reattach is where a plugin in debug mode listens.
type Reattach struct {
	Protocol        string `json:"protocol"`         // "grpc"
	ProtocolVersion int    `json:"protocol_version"` // the plugin API version it serves
	Network         string `json:"network"`          // "unix" or "tcp"
	Address         string `json:"address"`
	Pid             int    `json:"pid"`
}

func collectOptions(opts []Option) serveOptions {
	o := serveOptions{out: os.Stdout}
	for _, f := range opts {
		f(&o)
	}
	o.debug = o.debug || slices.Contains(os.Args[1:], DebugFlag) || slices.Contains(os.Args[1:], "-"+DebugFlag)
	return o
}

// serveDebug serves cfg in go-plugin's test mode (no handshake with a
// parent, no lifeline), prints the reattach line and returns when
// interrupted.
func serveDebug(name string, cfg *goplugin.ServeConfig, o serveOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rcs := make(chan *goplugin.ReattachConfig, 1)
	closed := make(chan struct{})
	cfg.Test = &goplugin.ServeTestConfig{Context: ctx, ReattachConfigCh: rcs, CloseCh: closed}
	go goplugin.Serve(cfg)
	var rc *goplugin.ReattachConfig
	select {
	case rc = <-rcs:
	case <-closed:
		return fmt.Errorf("plugin %s: serving in debug mode ended before it listened", name)
	}
	line, err := json.Marshal(map[string]Reattach{name: {Protocol: string(rc.Protocol), ProtocolVersion: rc.ProtocolVersion,
		Network: rc.Addr.Network(), Address: rc.Addr.String(), Pid: rc.Pid}})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "%s serves in debug mode. Start the core with this in its environment:\n\n\t%s='%s'\n\nCtrl-C stops the plugin.\n", name, ReattachEnv, line)
	<-closed
	return nil
}
