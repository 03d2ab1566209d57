package shim

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mcp-forge/mcp-forge/sdk/host"
	"github.com/mcp-forge/mcp-forge/sdk/internal/pb"
)

// fakeStream is the plugin's side of a Dial stream in memory: what was
// sent, and responses fed by the test; block makes Send wait (a stalled
// connection).
type fakeStream struct {
	mu     sync.Mutex
	sent   [][]byte
	closed bool
	block  chan struct{}
	recv   chan *pb.DialResponse
}

func (f *fakeStream) Send(r *pb.DialRequest) error {
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, r.GetData())
	return nil
}

func (f *fakeStream) CloseSend() error { f.mu.Lock(); f.closed = true; f.mu.Unlock(); return nil }

func (f *fakeStream) Recv() (*pb.DialResponse, error) {
	r, ok := <-f.recv
	if !ok {
		return nil, io.EOF
	}
	return r, nil
}

// Writes queued while a Send is in flight go out merged, in order, in
// messages of at most host.DialChunk; the half-close follows them.
func TestStreamConnMergesWrites(t *testing.T) {
	f := &fakeStream{block: make(chan struct{}), recv: make(chan *pb.DialResponse)}
	c := newStreamConn(f, func() {}, "c/e")
	defer close(f.recv)
	var want []byte
	for i := range 10 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 10_000)
		want = append(want, p...)
		if n, err := c.Write(p); err != nil || n != len(p) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	c.CloseWrite()
	close(f.block) // the first Send, blocked since the first write, goes
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		done := f.closed
		f.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		t.Fatal("no CloseSend after the writes")
	}
	if got := bytes.Join(f.sent, nil); !bytes.Equal(got, want) {
		t.Fatalf("sent %d bytes, not the %d written in order", len(got), len(want))
	}
	for _, m := range f.sent {
		if len(m) > host.DialChunk {
			t.Fatalf("a message of %d bytes, over %d", len(m), host.DialChunk)
		}
	}
	// 100 000 bytes: the first write alone (sent while the others queue),
	// then the rest merged into full chunks.
	if len(f.sent) > 5 {
		t.Errorf("%d messages for 10 queued writes; want them merged", len(f.sent))
	}
}

// A Write that cannot queue past its deadline, and a Read with nothing to
// read past its deadline, fail with os.ErrDeadlineExceeded and leave the
// connection usable.
func TestStreamConnDeadlines(t *testing.T) {
	f := &fakeStream{block: make(chan struct{}), recv: make(chan *pb.DialResponse, 1)}
	c := newStreamConn(f, func() {}, "c/e")
	defer close(f.recv)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline = %v", err)
	}
	c.SetReadDeadline(time.Time{})
	f.recv <- &pb.DialResponse{Kind: &pb.DialResponse_Data{Data: []byte("hi")}}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("Read after a deadline = %q, %v", buf, err)
	}
	// Sends are stalled: the queue fills, then the deadline ends the write.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 64*host.DialChunk)
	n, err := c.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(big) {
		t.Fatalf("Write into a stalled stream = %d, %v; want a timeout", n, err)
	}
	close(f.block)
	c.SetWriteDeadline(time.Time{})
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("Write after the stall: %v", err)
	}
	c.Close()
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
}
