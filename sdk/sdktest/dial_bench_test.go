package sdktest

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// BenchmarkDialRoundTrip: a 200-byte ping-pong with a sandbox's socket,
// directly and through Dial across the plugin connection (LocalHost
// served by the shim, no TLS): what one message hop of the channel costs.
func BenchmarkDialRoundTrip(b *testing.B) {
	lh := NewLocalHost(b.TempDir())
	c, err := lh.Create(context.Background(), host.Intent{Command: []string{"sleep", "60"}, Mounts: []host.Mount{{Subdir: "k", Target: "/k"}},
		Endpoints: []host.Endpoint{{Name: "echo", Path: "/k/e"}}})
	if err != nil {
		b.Fatal(err)
	}
	lh.Start(context.Background(), c.ID)
	defer lh.Remove(context.Background(), c.ID)
	sock := filepath.Join(lh.WorkspaceOf(c.ID), "k", "e")
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go io.Copy(conn, conn)
		}
	}()
	wire, wireFD := OverWire(b, lh, DialStream), OverWire(b, lh, DialFD)
	msg := make([]byte, 200)
	pingpong := func(b *testing.B, conn net.Conn) {
		buf := make([]byte, 200)
		for b.Loop() {
			conn.Write(msg)
			io.ReadFull(conn, buf)
		}
	}
	b.Run("direct", func(b *testing.B) {
		conn, _ := net.Dial("unix", sock)
		defer conn.Close()
		pingpong(b, conn)
	})
	for _, w := range []struct {
		name string
		h    host.Host
	}{{"dial", wire.Host}, {"dial-fd", wireFD.Host}} {
		b.Run(w.name, func(b *testing.B) {
			conn, err := w.h.Sandbox().Dial(context.Background(), c.ID, "echo")
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			pingpong(b, conn)
		})
	}
}
