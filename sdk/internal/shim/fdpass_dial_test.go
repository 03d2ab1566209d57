package shim

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// echoHost's sandbox dials one echoing unix socket, whatever the endpoint;
// nothing else of it is called.
type echoHost struct{ sb echoSandbox }

type echoSandbox struct {
	host.Sandbox
	sock string
}

func (h echoHost) Sandbox() host.Sandbox { return h.sb }
func (h echoHost) Audit() host.Audit     { return nil }
func (h echoSandbox) Dial(ctx context.Context, id, endpoint string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", h.sock)
}

// Dial takes the socket when the core sends it, and falls back to the
// stream whenever the fd channel cannot serve: the core has none, its end
// is closed (its send fails: it relays), or the socket the core announced
// never reaches the plugin (the plugin dials again, on the stream).
func TestDialCarriedOrFallsBack(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		setup  func(t *testing.T) (*FDSender, *os.File)
		wantFD bool
	}{
		{"socket handed over", func(t *testing.T) (*FDSender, *os.File) {
			s, p, _ := NewFDChannel()
			t.Cleanup(func() { s.Close() })
			return s, p
		}, true},
		{"core without a channel", func(t *testing.T) (*FDSender, *os.File) {
			_, p, _ := NewFDChannel()
			return nil, p
		}, false},
		{"core's end closed", func(t *testing.T) (*FDSender, *os.File) {
			s, p, _ := NewFDChannel()
			s.Close()
			return s, p
		}, false},
		{"announced socket lost", func(t *testing.T) (*FDSender, *os.File) {
			s, lost, _ := NewFDChannel() // the core sends here...
			_, p, _ := NewFDChannel()    // ...the plugin listens there
			t.Cleanup(func() { s.Close(); lost.Close() })
			return s, p
		}, false},
		{"plugin without a channel", func(t *testing.T) (*FDSender, *os.File) {
			s, _, _ := NewFDChannel()
			t.Cleanup(func() { s.Close() })
			return s, nil
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			echo := echoConn(t)
			fds, pluginEnd := c.setup(t)
			l, err := net.Listen("unix", filepath.Join(t.TempDir(), "g.sock"))
			if err != nil {
				t.Fatal(err)
			}
			s := grpc.NewServer(ServerOptions(DefaultMaxMessage)...)
			RegisterHost(s, echoHost{echoSandbox{sock: echo.RemoteAddr().String()}}, fds)
			go s.Serve(l)
			t.Cleanup(s.Stop)
			cc, err := grpc.NewClient("unix://"+l.Addr().String(), append(DialOptions(DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			sb := &sandboxClient{c: NewHostClient(cc).(*hostClient).sb.c}
			if pluginEnd != nil {
				if sb.fds, err = newFDReceiverFile(pluginEnd); err != nil {
					t.Fatal(err)
				}
				sb.fds.wait = 200 * time.Millisecond
				t.Cleanup(func() { sb.fds.conn.Close() })
			}
			conn, err := sb.Dial(context.Background(), "c-1", "echo")
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer conn.Close()
			echoes(t, conn)
			if _, isFD := conn.(fdConn); isFD != c.wantFD {
				t.Errorf("carried as %T, want the socket itself: %v", conn, c.wantFD)
			}
			if conn.RemoteAddr().String() != "c-1/echo" {
				t.Errorf("RemoteAddr %q, want c-1/echo", conn.RemoteAddr())
			}
		})
	}
}
