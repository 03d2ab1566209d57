package sdktest

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/shim"
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
	gl, _ := net.Listen("unix", filepath.Join(b.TempDir(), "g.sock"))
	s := grpc.NewServer(shim.ServerOptions(shim.DefaultMaxMessage)...)
	shim.RegisterHost(s, lh)
	go s.Serve(gl)
	defer s.Stop()
	cc, _ := grpc.NewClient("unix://"+gl.Addr().String(), append(shim.DialOptions(shim.DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	defer cc.Close()
	wire := shim.NewHostClient(cc).Sandbox()
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
	b.Run("dial", func(b *testing.B) {
		conn, err := wire.Dial(context.Background(), c.ID, "echo")
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		pingpong(b, conn)
	})
}
