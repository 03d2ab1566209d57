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
	var w Wire
	var pluginEnd *os.File
	if mode == DialFD {
		var err error
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
	w.Host = serveHost(t, h, w.fds, pluginEnd)
	return w
}

// serveHost serves h's host services, with fds as the core's end of an fd
// channel (nil: none), to a client whose end is pluginEnd (nil: none).
func serveHost(t testing.TB, h host.Host, fds *shim.FDSender, pluginEnd *os.File) host.Host {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "host.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(shim.ServerOptions(shim.DefaultMaxMessage)...)
	shim.RegisterHost(s, h, fds)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("unix://"+l.Addr().String(), append(shim.DialOptions(shim.DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if pluginEnd == nil {
		return shim.NewHostClient(conn)
	}
	wire, err := shim.NewHostClientFD(conn, pluginEnd)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}
