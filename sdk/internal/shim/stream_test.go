package shim

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// countingBackend counts its Executes.
type countingBackend struct{ n atomic.Int32 }

func (b *countingBackend) Capabilities(context.Context) (backend.Capabilities, error) {
	return backend.Capabilities{Languages: []string{"old"}}, nil
}

func (b *countingBackend) Execute(context.Context, backend.ExecuteRequest) (backend.ExecuteResult, error) {
	b.n.Add(1)
	return backend.ExecuteResult{Success: true, Stdout: "from Execute"}, nil
}

// A plugin built before ExecuteStream existed (its BackendService has no
// such method: Unimplemented) still runs the code once, through Execute,
// and the client remembers not to ask again.
func TestExecuteStreamOfAnOlderPlugin(t *testing.T) {
	old := pb.BackendService_ServiceDesc
	old.Streams = slices.DeleteFunc(slices.Clone(old.Streams), func(sd grpc.StreamDesc) bool { return sd.StreamName == "ExecuteStream" })
	if len(old.Streams) == len(pb.BackendService_ServiceDesc.Streams) {
		t.Fatal("the service has no ExecuteStream to leave out")
	}
	b := &countingBackend{}
	c := serveBackend(t, &old, b)
	for i := 1; i <= 2; i++ {
		r, err := c.ExecuteStream(context.Background(), backend.ExecuteRequest{Code: "x", MaxOutputBytes: 10}, func(ev backend.StreamEvent) {
			t.Errorf("event from a plugin that cannot stream: %+v", ev)
		})
		if err != nil || r.Stdout != "from Execute" {
			t.Fatalf("call %d: %v %+v", i, err, r)
		}
		if n := b.n.Load(); n != int32(i) {
			t.Fatalf("call %d: Execute ran %d times", i, n)
		}
		if !c.noStream.Load() {
			t.Fatalf("call %d: the client does not remember that the plugin does not stream", i)
		}
	}
}

// serveBackend serves b as a plugin's BackendService of API v2 under desc
// (a test may leave methods out, as an older SDK's plugin has them) and
// returns the core's client of it, over an in-memory connection.
func serveBackend(t *testing.T, desc *grpc.ServiceDesc, b backend.Backend) *BackendClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	s.RegisterService(desc, &backendServer{pluginServer: pluginServer[backend.Backend]{kind: "backend", info: Info{Name: "test"}, impl: b, set: true, maxMessage: DefaultMaxMessage}})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///test", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &BackendClient{pluginClient: pluginClient{api: 2}, backend: pb.NewBackendServiceClient(conn)}
}
