package sdktest

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
)

// DialMode is how a host served over the plugin connection carries Dial.
type DialMode string

const (
	// DialStream relays the connection's bytes on the Dial stream: a plugin
	// the core did not start, or an endpoint that is no local socket.
	DialStream DialMode = "stream"
	// DialFD hands the plugin the connected socket over its fd channel.
	DialFD DialMode = "fd"
)

// Wire is a host reached as a plugin reaches the core's host services.
type Wire struct {
	Host host.Host
	fds  *shim.FDSender
}

// OverWire serves h's host services on a unix socket, as the core serves
// them to a plugin, and returns the shim's client of them: the plugin's
// view, with Dial carried as mode says. In DialFD, t fails at its end
// (once its parallel subtests are done) if no socket went over the fd
// channel: a suite that passed on the stream alone tested nothing new.
func OverWire(t testing.TB, h host.Host, mode DialMode) Wire {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "host.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var w Wire
	var pluginEnd *os.File
	if mode == DialFD {
		if w.fds, pluginEnd, err = shim.NewFDChannel(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.fds.Close() })
		t.Cleanup(func() {
			if w.fds.Sent() == 0 {
				t.Errorf("dial mode %s: no socket went over the fd channel", mode)
			}
		})
	}
	s := grpc.NewServer(shim.ServerOptions(shim.DefaultMaxMessage)...)
	shim.RegisterHost(s, h, w.fds)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+l.Addr().String(), append(shim.DialOptions(shim.DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if pluginEnd == nil {
		w.Host = shim.NewHostClient(conn)
		return w
	}
	if w.Host, err = shim.NewHostClientFD(conn, pluginEnd); err != nil {
		t.Fatal(err)
	}
	return w
}
