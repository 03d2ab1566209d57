package shim

import (
	"context"
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frameCounter parses one direction of an HTTP/2 connection and counts
// PING frames that are not acks.
type frameCounter struct {
	mu      sync.Mutex
	preface int // bytes of the client preface still to skip
	buf     []byte
	pings   int
}

func (c *frameCounter) feed(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	if c.preface > 0 {
		n := min(c.preface, len(c.buf))
		c.buf, c.preface = c.buf[n:], c.preface-n
	}
	for len(c.buf) >= 9 {
		size := int(c.buf[0])<<16 | int(binary.BigEndian.Uint16(c.buf[1:3]))
		if len(c.buf) < 9+size {
			return
		}
		if typ, flags := c.buf[3], c.buf[4]; typ == 0x6 && flags&0x1 == 0 {
			c.pings++
		}
		c.buf = c.buf[9+size:]
	}
}

func (c *frameCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pings
}

type countingConn struct {
	net.Conn
	out, in *frameCounter
}

func (c countingConn) Write(p []byte) (int, error) {
	c.out.feed(p)
	return c.Conn.Write(p)
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.feed(p[:n])
	return n, err
}

// Calls on the plugin boundary are not wrapped in flow-control pings:
// gRPC's dynamic window (BDP estimation) sends a ping with the first data
// of a call on an idle connection and the peer acks it, extra frames and
// wake-ups in both processes for every plugin call. The boundary's static
// windows turn it off.
func TestBoundarySendsNoPings(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(DefaultMaxMessage)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	out, in := &frameCounter{preface: 24}, &frameCounter{}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, out: out, in: in}, nil
	}
	opts := append(DialOptions(DefaultMaxMessage), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dial))
	conn, err := grpc.NewClient("passthrough:///"+sock, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 20 {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if o, i := out.count(), in.count(); o+i > 0 {
		t.Errorf("20 calls sent %d pings to the server and received %d: flow control pings around every call", o, i)
	}
}
