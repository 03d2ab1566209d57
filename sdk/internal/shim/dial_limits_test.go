package shim

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// refusingSandbox is echoSandbox that records the channels the shim
// refused before they reached it.
type refusingSandbox struct {
	echoSandbox
	mu      sync.Mutex
	refused []string
}

func (r *refusingSandbox) RefuseChannel(id, endpoint string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, id+"/"+endpoint+": "+err.Error())
}

type refusingHost struct{ sb *refusingSandbox }

func (h refusingHost) Sandbox() host.Sandbox { return h.sb }
func (h refusingHost) Audit() host.Audit     { return nil }

// relayHost serves h's host services (no fd channel: every Dial relays)
// and returns a plugin-side client of them.
func relayHost(t *testing.T, h host.Host) (*sandboxClient, pb.SandboxServiceClient) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "g.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(ServerOptions(DefaultMaxMessage)...)
	RegisterHost(s, h, nil)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("unix://"+l.Addr().String(), append(DialOptions(DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	raw := NewHostClient(cc).(*hostClient).sb.c
	return &sandboxClient{c: raw}, raw
}

// A plugin holds at most MaxOpenChannels relayed channels: the next Dial is
// refused (and reported to the host, which audits it) until one closes.
func TestDialOpenChannelsBounded(t *testing.T) {
	t.Parallel()
	sb := &refusingSandbox{echoSandbox: echoSandbox{sock: echoConn(t).RemoteAddr().String()}}
	client, _ := relayHost(t, refusingHost{sb})
	var open []net.Conn
	for range MaxOpenChannels {
		c, err := client.Dial(context.Background(), "c-1", "echo")
		if err != nil {
			t.Fatalf("Dial %d: %v", len(open)+1, err)
		}
		echoes(t, c) // relayed to the end, so it counts
		open = append(open, c)
	}
	_, err := client.Dial(context.Background(), "c-1", "echo")
	var he *host.Error
	if !errors.As(err, &he) || he.Kind != host.KindUnavailable || !strings.Contains(err.Error(), "channels open") {
		t.Fatalf("Dial past the bound: %v; want unavailable, naming the open channels", err)
	}
	sb.mu.Lock()
	refused := len(sb.refused)
	sb.mu.Unlock()
	if refused != 1 {
		t.Fatalf("the host was told of %d refusals, want 1", refused)
	}
	open[0].Close()
	for i := 0; ; i++ { // the core sees the close a moment later
		c, err := client.Dial(context.Background(), "c-1", "echo")
		if err == nil {
			echoes(t, c)
			c.Close()
			break
		}
		if i == 200 {
			t.Fatalf("a closed channel was not given back: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}
}

// A message larger than any the SDK's sender makes ends the channel rather
// than sit in the core's memory.
func TestDialRefusesOversizedMessages(t *testing.T) {
	t.Parallel()
	_, raw := relayHost(t, echoHost{echoSandbox{sock: echoConn(t).RemoteAddr().String()}})
	stream, err := raw.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.DialRequest{Kind: &pb.DialRequest_Open{Open: &pb.DialOpen{ContainerId: "c-1", Endpoint: "echo"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // opened
		t.Fatal(err)
	}
	if err := stream.Send(&pb.DialRequest{Kind: &pb.DialRequest_Data{Data: make([]byte, MaxDialData+1)}}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			if !strings.Contains(err.Error(), "more than the protocol's") {
				t.Fatalf("the channel ended with %v; want the message size named", err)
			}
			return
		}
		if len(r.GetData()) > 0 {
			t.Fatalf("%d bytes of an oversized message were relayed", len(r.GetData()))
		}
	}
}
